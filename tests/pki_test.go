package tests

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testPKI is a certificate authority made at test time and a broker certificate it signed, for
// 127.0.0.1 and localhost, written as PEM files: CAFile (the CA's certificate, what clients
// trust) and KeystoreFile (the broker's unencrypted PKCS#8 key followed by its certificate, what
// Kafka reads with ssl.keystore.type=PEM). OtherCAFile is a second CA that signed nothing the
// broker presents, for the untrusted-certificate cases. ClientCertFile and ClientKeyFile are a
// client certificate the CA signed (mutual TLS, what a listener with ssl.client.auth=required and
// TruststoreFile accepts), OtherClientCertFile and OtherClientKeyFile one the other CA signed.
// TruststoreFile is the CA's certificate, for the broker's ssl.truststore.
type testPKI struct {
	CAFile       string
	OtherCAFile  string
	KeystoreFile string
	CASubject    string // the CA's subject common name

	TruststoreFile      string
	ClientCertFile      string
	ClientKeyFile       string
	OtherClientCertFile string
	OtherClientKeyFile  string
}

// newTestPKI writes a fresh CA, a second unrelated CA and a broker key and certificate into dir.
func newTestPKI(t *testing.T, dir string) testPKI {
	t.Helper()
	caKey, caCert, caDER := newCA(t, "kbr test CA")
	otherKey, otherCert, otherDER := newCA(t, "kbr other CA")

	brokerKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: "kbr test broker"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	brokerDER, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &brokerKey.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(brokerKey)
	require.NoError(t, err)

	p := testPKI{
		CAFile:              filepath.Join(dir, "ca.pem"),
		OtherCAFile:         filepath.Join(dir, "other-ca.pem"),
		KeystoreFile:        filepath.Join(dir, "broker.pem"),
		CASubject:           caCert.Subject.CommonName,
		TruststoreFile:      filepath.Join(dir, "truststore.pem"),
		ClientCertFile:      filepath.Join(dir, "client.pem"),
		ClientKeyFile:       filepath.Join(dir, "client-key.pem"),
		OtherClientCertFile: filepath.Join(dir, "other-client.pem"),
		OtherClientKeyFile:  filepath.Join(dir, "other-client-key.pem"),
	}
	writePEM(t, p.TruststoreFile, pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	writeClientCert(t, "kbr test client", caCert, caKey, p.ClientCertFile, p.ClientKeyFile)
	writeClientCert(t, "kbr other client", otherCert, otherKey, p.OtherClientCertFile, p.OtherClientKeyFile)
	writePEM(t, p.CAFile, pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	writePEM(t, p.OtherCAFile, pem.Block{Type: "CERTIFICATE", Bytes: otherDER})
	writePEM(t, p.KeystoreFile,
		pem.Block{Type: "PRIVATE KEY", Bytes: keyDER},
		pem.Block{Type: "CERTIFICATE", Bytes: brokerDER},
		pem.Block{Type: "CERTIFICATE", Bytes: caDER},
	)
	return p
}

// newCA returns a self-signed CA's key, parsed certificate and DER bytes.
func newCA(t *testing.T, name string) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return key, cert, der
}

// writeClientCert writes a client certificate named name, signed by ca with caKey, and its
// unencrypted PKCS#8 key as PEM files.
func writeClientCert(t *testing.T, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	writePEM(t, certFile, pem.Block{Type: "CERTIFICATE", Bytes: der})
	writePEM(t, keyFile, pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

func writePEM(t *testing.T, path string, blocks ...pem.Block) {
	t.Helper()
	var out []byte
	for _, b := range blocks {
		out = append(out, pem.EncodeToMemory(&b)...)
	}
	require.NoError(t, os.WriteFile(path, out, 0o600))
}
