package promexport

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pushRequest is what the fake Push Gateway received in one request.
type pushRequest struct {
	method, path string
	user, pass   string
	authOK       bool
	fams         map[string]*dto.MetricFamily
	err          error // decoding the body
}

// gateway is a fake Prometheus Push Gateway on loopback that records every
// request and answers status.
type gateway struct {
	srv    *httptest.Server
	mu     sync.Mutex // guards reqs and status
	reqs   []pushRequest
	status int
}

func newGateway(t *testing.T) *gateway {
	t.Helper()
	g := &gateway{status: http.StatusOK}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := pushRequest{method: r.Method, path: r.URL.Path, fams: map[string]*dto.MetricFamily{}}
		req.user, req.pass, req.authOK = r.BasicAuth()
		dec := expfmt.NewDecoder(r.Body, expfmt.ResponseFormat(r.Header))
		for {
			var mf dto.MetricFamily
			if err := dec.Decode(&mf); err != nil {
				if !errors.Is(err, io.EOF) {
					req.err = err
				}
				break
			}
			req.fams[mf.GetName()] = &mf
		}
		g.mu.Lock()
		g.reqs = append(g.reqs, req)
		status := g.status
		g.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(g.srv.Close)
	return g
}

func (g *gateway) requests() []pushRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]pushRequest(nil), g.reqs...)
}

func (g *gateway) setStatus(s int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.status = s
}

// TestPushPeriodicAndOnClose: with push_url and push_interval the exporter
// PUTs its metrics to /metrics/job/<push_job_name> every interval, with the
// basic auth credentials, and once more on Close; nothing after Close.
func TestPushPeriodicAndOnClose(t *testing.T) {
	g := newGateway(t)
	e, err := newExporter(parse(t, `
push_url: "`+g.srv.URL+`"
push_interval: 20ms
push_job_name: kbr_job
push_basic_auth: {username: alice, password: secret}
`), nil)
	require.NoError(t, err)
	e.NewCounterCtor("input_received", "label", "path")("", "root.input").Incr(5)

	require.Eventually(t, func() bool { return len(g.requests()) >= 2 }, 10*time.Second, 5*time.Millisecond, "periodic pushes")
	e.NewCounterCtor("input_received", "label", "path")("", "root.input").Incr(1)
	require.NoError(t, e.Close(t.Context()))
	reqs := g.requests()
	for i, r := range reqs {
		require.NoError(t, r.err, "push %d: body", i)
		assert.Equal(t, http.MethodPut, r.method, "push %d", i)
		assert.Equal(t, "/metrics/job/kbr_job", r.path, "push %d", i)
		assert.True(t, r.authOK, "push %d: basic auth", i)
		assert.Equal(t, "alice", r.user, "push %d", i)
		assert.Equal(t, "secret", r.pass, "push %d", i)
		require.Contains(t, r.fams, "input_received", "push %d", i)
		assert.Equal(t, dto.MetricType_COUNTER, r.fams["input_received"].GetType())
	}
	last := reqs[len(reqs)-1].fams["input_received"].GetMetric()
	require.Len(t, last, 1)
	assert.Equal(t, 6.0, last[0].GetCounter().GetValue(), "the push on Close has the final value")

	time.Sleep(100 * time.Millisecond)
	assert.Len(t, g.requests(), len(reqs), "pushes after Close")
}

// TestPushOnCloseOnly: push_url without push_interval pushes once, on
// Close, under the default job benthos_push and without credentials.
func TestPushOnCloseOnly(t *testing.T) {
	g := newGateway(t)
	e, err := newExporter(parse(t, `push_url: "`+g.srv.URL+`"`), nil)
	require.NoError(t, err)
	e.NewGaugeCtor("buffer_backlog")().Set(3)
	time.Sleep(50 * time.Millisecond)
	require.Empty(t, g.requests(), "pushed before Close")
	require.NoError(t, e.Close(t.Context()))
	reqs := g.requests()
	require.Len(t, reqs, 1)
	assert.Equal(t, "/metrics/job/benthos_push", reqs[0].path)
	assert.False(t, reqs[0].authOK, "credentials sent without push_basic_auth")
	assert.Equal(t, 3.0, reqs[0].fams["buffer_backlog"].GetMetric()[0].GetGauge().GetValue())
}

// TestPushFailures: a gateway that refuses pushes does not stop the
// periodic pushes; Close returns the error of the last push, naming the
// URL, and a second Close returns the same.
func TestPushFailures(t *testing.T) {
	g := newGateway(t)
	g.setStatus(http.StatusInternalServerError)
	e, err := newExporter(parse(t, `{push_url: "`+g.srv.URL+`", push_interval: 10ms}`), nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(g.requests()) >= 3 }, 10*time.Second, 5*time.Millisecond, "pushes go on after failures")
	err = e.Close(t.Context())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "push metrics to "+g.srv.URL)
	assert.Equal(t, err, e.Close(t.Context()), "second Close")
}
