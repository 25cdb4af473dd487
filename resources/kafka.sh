#!/usr/bin/env bash
# kafka.sh manages one real Apache Kafka broker (KRaft, combined broker+controller, node 1)
# listening on loopback only, for the integration tests and CI; or, with the cluster-* commands
# (or the per-node environment below), a cluster of several such nodes on loopback.
#
# Usage: resources/kafka.sh <command>
#   fetch     download kafka_2.13 and its runtime jars from Maven Central (once; cached), and
#             kafka-tools (Kafka's command-line tools, e.g. ConsumerGroupCommand, which the tests
#             run; added to a cache fetched before without it)
#   start     fetch if needed, format storage if new, start the broker, wait until it answers
#             (a no-op when the broker this script started is already up), make sure share
#             groups are enabled (below); prints the address
#   stop      stop the broker this script started (SIGTERM, then SIGKILL after 30s)
#   restart   stop, then start
#   status    exit 0 when our broker runs and answers the Kafka protocol, 1 otherwise
#   reset     stop, then delete the state (topics, logs, config); the jars stay
#   logs      print the last 100 lines of the broker logs (logs -f follows them)
#   address   print the bootstrap address (127.0.0.1:<port>)
#   kill      SIGKILL the broker this script started and wait until it is gone (a crash, for
#             fault tests; start brings it back)
#
# Cluster commands: a KRaft cluster of KBR_KAFKA_CLUSTER_NODES combined broker+controller nodes
# (default 3; every node a voter) on loopback, each node a broker of this script with its own
# home and ports (node i, 1-based: KBR_KAFKA_HOME=<base>/node-<i>, KBR_KAFKA_PORT=<port>+2(i-1),
# controller port the one after it), heaps of 256 MiB (KBR_KAFKA_HEAP_MIN/MAX default 256m here),
# internal topics replicated to min(3, nodes), all nodes sharing one set of jars (the default
# KBR_KAFKA_HOME's libs, fetched there if missing, linked into every node's home):
#   cluster-start    start every node that does not run (concurrently: a node comes up only
#                    once a majority of voters runs), wait until every node answers, make sure
#                    share groups are enabled (below), print the bootstrap list (idempotent)
#   cluster-stop     stop every node, concurrently (SIGTERM, then SIGKILL after 30s)
#   cluster-status   one status line per node; exit 0 when every node runs and answers
#   cluster-reset    stop every node (concurrently) and delete the state of every node
#   cluster-address  print the bootstrap list
#   cluster-env I    print the environment of node I (KEY=VALUE lines), so that any command of
#                    this script works on one node: env $(kafka.sh cluster-env 2) kafka.sh kill
#   KBR_KAFKA_CLUSTER_HOME   base home of the nodes (default $HOME/.cache/kafka_batched_ranges/cluster)
#   KBR_KAFKA_CLUSTER_PORT   PLAINTEXT port of node 1 (default 9192; the nodes use 2N ports from it)
#   KBR_KAFKA_CLUSTER_NODES  number of nodes (default 3)
#
# Proxied broker (resources/bench -mode wan, make bench-wan): a single broker of this script
# whose PLAINTEXT listener is advertised at another port, where the benchmark's latency proxy
# listens and forwards to the listener, so that every connection of a client (not only its
# bootstrap) goes through the proxy. It is a broker of its own, never the one of start/stop:
#   wan-start    start it (idempotent; its home shares the default KBR_KAFKA_HOME's jars, fetched
#                there if missing); prints its listener's address, the proxy's upstream
#   wan-stop     stop it
#   wan-status   status of it
#   wan-reset    stop it and delete its state (its topics)
#   wan-env      print its environment (KEY=VALUE lines), so that any command of this script
#                works on it: env $(kafka.sh wan-env) kafka.sh logs
#   KBR_KAFKA_WAN_HOME   its home (default $HOME/.cache/kafka_batched_ranges/wan)
#   KBR_KAFKA_WAN_PORT   its PLAINTEXT listener port (default 9492); its controller listens on the
#                        next port and it advertises the one after (9494), where the proxy listens
#
# Per-node environment (the cluster commands set it; tests set it themselves to drive the nodes
# one by one; the defaults are the single broker's):
#   KBR_KAFKA_NODE_ID          node.id (default 1)
#   KBR_KAFKA_VOTERS           controller.quorum.voters (default <node id>@127.0.0.1:<controller port>)
#   KBR_KAFKA_CLUSTER_ID       cluster id to format the storage with (default a random one, kept
#                              in state/cluster.id); every node of a cluster needs the same one
#   KBR_KAFKA_INTERNAL_RF      replication factor of the internal topics (offsets, transactions,
#                              share state; default 1)
#   KBR_KAFKA_HEAP_MIN         JVM -Xms (default 256m)
#   KBR_KAFKA_HEAP_MAX         JVM -Xmx (default 1g)
# With more than one voter a node also fences a dead broker within 3s
# (broker.session.timeout.ms=3000), so a killed node's partitions lose their leader quickly,
# and is in a rack of its own, rack-<node id> (broker.rack), with the rack-aware replica
# selector (replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector):
# follower fetching (KIP-392), so a client with rack_id rack-<i> reads from node i's replica.
#
# Environment:
#   KBR_KAFKA_HOME             cache and state root
#                              (default $HOME/.cache/kafka_batched_ranges/kafka-<version>)
#   KBR_KAFKA_PORT             PLAINTEXT listener port (default 9092)
#   KBR_KAFKA_CONTROLLER_PORT  CONTROLLER listener port (default 9093)
#   KBR_KAFKA_VERSION          Kafka version to fetch (default 4.4.0)
#   KBR_KAFKA_START_TIMEOUT    seconds to wait for the broker to come up (default 90)
#   KBR_KAFKA_EXTRA_CONFIG     extra server.properties lines, appended last (default none)
#   KBR_KAFKA_ADVERTISED_PORT  port of the PLAINTEXT listener that the broker advertises to
#                              clients (default KBR_KAFKA_PORT): another one is a proxy's in front
#                              of the listener (wan-start). Such a broker is reachable by clients
#                              only through the proxy, which may not run yet, so start does not
#                              check its share groups (storage formatted by Kafka 4.4.0 has them)
#
# Optional SASL_SSL listener (off unless KBR_KAFKA_SASL_SSL_PORT is set), on the same loopback
# address next to the PLAINTEXT one, which stays the inter-broker and health-check listener:
#   KBR_KAFKA_SASL_SSL_PORT       SASL_SSL listener port
#   KBR_KAFKA_SSL_KEYSTORE_PEM    PEM file with the broker's private key (unencrypted PKCS#8) and
#                                 its certificate chain (ssl.keystore.type=PEM); required with it
#   KBR_KAFKA_SSL_TRUSTSTORE_PEM  PEM file of CA certificates the listener trusts
#                                 (ssl.truststore.type=PEM; only needed for client certificates)
#   KBR_KAFKA_SSL_CLIENT_AUTH     ssl.client.auth of the listener: none (default), requested, required
#   KBR_KAFKA_SASL_MECHANISMS     enabled mechanisms (default PLAIN,SCRAM-SHA-256,SCRAM-SHA-512;
#                                 OAUTHBEARER may be added: it accepts Kafka's unsecured JWTs, so
#                                 only ever use it on a test broker)
#   KBR_KAFKA_SASL_PLAIN_USERS    PLAIN users of the listener's JAAS config, "user:password,..."
#   KBR_KAFKA_SASL_SCRAM_USERS    SCRAM-SHA-256 and SCRAM-SHA-512 users, "user:password,...";
#                                 created when the storage is formatted (kafka-storage format
#                                 --add-scram), so changing them needs a reset (or kadm
#                                 AlterUserSCRAMs on the running broker)
# User names and passwords may hold letters, digits and . _ - only.
#
# Share groups (KIP-932): a broker serves them only while the cluster's share.version feature is
# finalized at 1 or more. Storage formatted by Kafka 4.4.0 finalizes it at its latest level (2),
# but storage formatted by an older release, or a cluster whose feature was downgraded, has 0 and
# answers share-group requests with UNSUPPORTED_VERSION. So start (a single voter) and
# cluster-start (once every node answers) describe the features with kafka-tools'
# FeatureCommand and, when share.version is below 1, upgrade it to the highest level the broker
# supports: on the running broker, without a restart, and only then (idempotent). A Kafka that
# does not know share.version is left as it is, with a line saying so.
#
# Layout under KBR_KAFKA_HOME:
#   libs/         the jars (libs/.complete marks a finished fetch)
#   state/        server.properties, kafka.pid, cluster.id
#   state/data/   log.dirs (the topics); state/logs/ server.log (WARN+) and stdout.log
# Only the process recorded in state/kafka.pid, whose command line names kafka.Kafka and this
# state dir, is ever signalled.
set -euo pipefail

readonly KAFKA_VERSION="${KBR_KAFKA_VERSION:-4.4.0}"
readonly SCALA_VERSION="2.13"
readonly DEPENDENCY_PLUGIN="org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
readonly HOME_DIR="${KBR_KAFKA_HOME:-${HOME}/.cache/kafka_batched_ranges/kafka-${KAFKA_VERSION}}"
readonly LIBS_DIR="${HOME_DIR}/libs"
readonly STATE_DIR="${HOME_DIR}/state"
readonly DATA_DIR="${STATE_DIR}/data"
readonly LOG_DIR="${STATE_DIR}/logs"
readonly PROPS="${STATE_DIR}/server.properties"
readonly PID_FILE="${STATE_DIR}/kafka.pid"
readonly CLUSTER_ID_FILE="${STATE_DIR}/cluster.id"
readonly LOCK_FILE="${HOME_DIR}/.lock"
readonly PORT="${KBR_KAFKA_PORT:-9092}"
readonly CONTROLLER_PORT="${KBR_KAFKA_CONTROLLER_PORT:-9093}"
readonly ADVERTISED_PORT="${KBR_KAFKA_ADVERTISED_PORT:-${PORT}}"
readonly HOST="127.0.0.1"
readonly NODE_ID="${KBR_KAFKA_NODE_ID:-1}"
readonly VOTERS="${KBR_KAFKA_VOTERS:-${NODE_ID}@${HOST}:${CONTROLLER_PORT}}"
readonly INTERNAL_RF="${KBR_KAFKA_INTERNAL_RF:-1}"
readonly HEAP_MIN="${KBR_KAFKA_HEAP_MIN:-256m}"
readonly HEAP_MAX="${KBR_KAFKA_HEAP_MAX:-1g}"
readonly DEFAULT_HOME="${HOME}/.cache/kafka_batched_ranges/kafka-${KAFKA_VERSION}"
readonly CLUSTER_HOME="${KBR_KAFKA_CLUSTER_HOME:-${HOME}/.cache/kafka_batched_ranges/cluster}"
readonly CLUSTER_PORT="${KBR_KAFKA_CLUSTER_PORT:-9192}"
readonly CLUSTER_NODES="${KBR_KAFKA_CLUSTER_NODES:-3}"
readonly WAN_HOME="${KBR_KAFKA_WAN_HOME:-${HOME}/.cache/kafka_batched_ranges/wan}"
readonly WAN_PORT="${KBR_KAFKA_WAN_PORT:-9492}"
readonly SASL_SSL_PORT="${KBR_KAFKA_SASL_SSL_PORT:-}"
readonly SASL_MECHANISMS="${KBR_KAFKA_SASL_MECHANISMS:-PLAIN,SCRAM-SHA-256,SCRAM-SHA-512}"
readonly START_TIMEOUT="${KBR_KAFKA_START_TIMEOUT:-90}"
readonly STOP_TIMEOUT=30
readonly SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly LOG4J_CONFIG="${SCRIPT_DIR}/kafka/log4j2.properties"

log() { echo "kafka.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

require_cmd() {
	command -v "$1" >/dev/null 2>&1 || die "'$1' not found in PATH ($2)"
}

# lock serialises start/stop/reset/fetch of this KBR_KAFKA_HOME across concurrent callers.
lock() {
	mkdir -p "${HOME_DIR}"
	if command -v flock >/dev/null 2>&1; then
		exec 9>"${LOCK_FILE}"
		flock -w 300 9 || die "could not lock ${LOCK_FILE} within 300s"
	fi
}

# ---------------------------------------------------------------------------------------------
# fetch

libs_complete() {
	[[ -f "${LIBS_DIR}/.complete" && -f "${LIBS_DIR}/kafka_${SCALA_VERSION}-${KAFKA_VERSION}.jar" ]] &&
		compgen -G "${LIBS_DIR}/log4j-slf4j-impl-*.jar" >/dev/null
}

# fetch_tools DIR copies kafka-tools (without its dependencies: the tools the tests run need
# only the broker's jars besides it) into DIR, unless it is there, and jackson-dataformat-csv in
# the version of the broker's jackson-databind, which the Kafka distribution ships for the group
# commands' CSV (--export, --from-file) and the broker's dependencies leave out. Into a complete
# LIBS_DIR a running broker uses, a jar is added under a temporary name and renamed, nothing else
# moves.
fetch_tools() {
	local dir="$1" jar="kafka-tools-${KAFKA_VERSION}.jar" databind jackson
	databind="$(compgen -G "${dir}/jackson-databind-*.jar" | head -n 1 || true)"
	jackson="${databind##*/jackson-databind-}"
	jackson="${jackson%.jar}"
	fetch_jar "${dir}" "org.apache.kafka:kafka-tools:${KAFKA_VERSION}" "${jar}"
	if [[ -n "${jackson}" ]]; then
		fetch_jar "${dir}" "com.fasterxml.jackson.dataformat:jackson-dataformat-csv:${jackson}" "jackson-dataformat-csv-${jackson}.jar"
	fi
}

# fetch_jar DIR ARTIFACT JAR copies the Maven artifact (without its dependencies) into DIR as
# JAR, unless it is there.
fetch_jar() {
	local dir="$1" artifact="$2" jar="$3" work
	[[ -f "${dir}/${jar}" ]] && return 0
	require_cmd mvn "install Maven, e.g. apt-get install -y maven"
	work="$(mktemp -d)"
	log "fetching ${artifact}"
	if ! (cd "${work}" && mvn -q -B "${DEPENDENCY_PLUGIN}:copy" \
		-Dartifact="${artifact}" \
		-DoutputDirectory="${work}/out" >"${work}/mvn.log" 2>&1) || [[ ! -f "${work}/out/${jar}" ]]; then
		tail -n 50 "${work}/mvn.log" >&2 || true
		rm -rf "${work}"
		die "maven could not fetch ${artifact}"
	fi
	mv "${work}/out/${jar}" "${dir}/.${jar}.tmp.$$"
	mv "${dir}/.${jar}.tmp.$$" "${dir}/${jar}"
	rm -rf "${work}"
}

cmd_fetch() {
	if libs_complete; then
		fetch_tools "${LIBS_DIR}"
		log "jars already in ${LIBS_DIR}"
		return 0
	fi
	require_cmd mvn "install Maven, e.g. apt-get install -y maven"
	require_cmd java "install Java 17+, e.g. apt-get install -y openjdk-17-jre-headless"
	local work tmp_libs started
	started=$(date +%s)
	work="$(mktemp -d)"
	tmp_libs="${HOME_DIR}/libs.tmp.$$"
	rm -rf "${tmp_libs}"
	cat >"${work}/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.kbr</groupId>
  <artifactId>kafka-fetch</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_${SCALA_VERSION}</artifactId>
      <version>${KAFKA_VERSION}</version>
    </dependency>
  </dependencies>
</project>
EOF
	log "fetching org.apache.kafka:kafka_${SCALA_VERSION}:${KAFKA_VERSION} and its runtime dependencies"
	if ! (cd "${work}" && mvn -q -B "${DEPENDENCY_PLUGIN}:copy-dependencies" \
		-DincludeScope=runtime -DoutputDirectory="${tmp_libs}" >"${work}/mvn.log" 2>&1); then
		tail -n 50 "${work}/mvn.log" >&2 || true
		rm -rf "${work}" "${tmp_libs}"
		die "maven could not fetch the Kafka jars"
	fi
	[[ -f "${tmp_libs}/kafka_${SCALA_VERSION}-${KAFKA_VERSION}.jar" ]] ||
		{ rm -rf "${work}" "${tmp_libs}"; die "kafka_${SCALA_VERSION}-${KAFKA_VERSION}.jar missing after fetch"; }
	# Kafka logs through slf4j 1.x, but the binding to log4j2 is not among kafka_2.13's runtime
	# dependencies (the Kafka distribution adds it): fetch log4j-slf4j-impl in log4j-core's version.
	local log4j_core log4j_version
	log4j_core="$(cd "${tmp_libs}" && ls log4j-core-2.*.jar 2>/dev/null | head -n 1)"
	[[ -n "${log4j_core}" ]] || { rm -rf "${work}" "${tmp_libs}"; die "log4j-core missing after fetch"; }
	log4j_version="${log4j_core#log4j-core-}"
	log4j_version="${log4j_version%.jar}"
	if ! (cd "${work}" && mvn -q -B "${DEPENDENCY_PLUGIN}:copy" \
		-Dartifact="org.apache.logging.log4j:log4j-slf4j-impl:${log4j_version}" \
		-DoutputDirectory="${tmp_libs}" >"${work}/mvn.log" 2>&1); then
		tail -n 50 "${work}/mvn.log" >&2 || true
		rm -rf "${work}" "${tmp_libs}"
		die "maven could not fetch log4j-slf4j-impl ${log4j_version}"
	fi
	rm -rf "${work}"
	fetch_tools "${tmp_libs}"
	ls "${tmp_libs}" >"${tmp_libs}/.complete"
	rm -rf "${LIBS_DIR}"
	mv "${tmp_libs}" "${LIBS_DIR}"
	log "fetched $(find "${LIBS_DIR}" -name '*.jar' | wc -l) jars into ${LIBS_DIR} in $(($(date +%s) - started))s"
}

# ---------------------------------------------------------------------------------------------
# process identity and health

# is_ours PID: PID is alive and is the kafka.Kafka JVM run on this state dir's server.properties.
is_ours() {
	local pid="$1" cmdline
	[[ "${pid}" =~ ^[0-9]+$ ]] || return 1
	[[ -r "/proc/${pid}/cmdline" ]] || return 1
	cmdline="$(tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null)" || return 1
	[[ "${cmdline}" == *"kafka.Kafka ${PROPS}"* ]]
}

# our_pid prints the pid of our running broker, or fails. A stale pid file is removed.
our_pid() {
	local pid
	[[ -f "${PID_FILE}" ]] || return 1
	pid="$(cat "${PID_FILE}" 2>/dev/null || true)"
	if is_ours "${pid}"; then
		echo "${pid}"
		return 0
	fi
	log "removing stale pid file (pid '${pid}' is not our broker)"
	rm -f "${PID_FILE}"
	return 1
}

# port_open PORT: something accepts TCP connections on HOST:PORT.
port_open() {
	timeout 2 bash -c "exec 3<>/dev/tcp/${HOST}/$1" 2>/dev/null
}

# answers_kafka: the listener answers a Kafka ApiVersions v0 request (api key 18, correlation id
# 7, client id "kbr") with a response carrying correlation id 7 and error code 0.
answers_kafka() {
	local reply
	reply="$(timeout 5 bash -c "
		exec 3<>/dev/tcp/${HOST}/${PORT} || exit 1
		printf '\x00\x00\x00\x0d\x00\x12\x00\x00\x00\x00\x00\x07\x00\x03kbr' >&3
		head -c 10 <&3 | od -An -tx1
	" 2>/dev/null)" || return 1
	reply="$(echo ${reply})" # squeeze whitespace
	[[ "${reply}" =~ ^00\ [0-9a-f]{2}\ [0-9a-f]{2}\ [0-9a-f]{2}\ 00\ 00\ 00\ 07\ 00\ 00$ ]]
}

started_logged() {
	grep -q "Kafka Server started" "${LOG_DIR}/server.log" 2>/dev/null
}

show_logs() {
	local n="${1:-50}"
	for f in "${LOG_DIR}/server.log" "${LOG_DIR}/stdout.log"; do
		[[ -s "${f}" ]] || continue
		echo "==> ${f} (last ${n} lines) <==" >&2
		tail -n "${n}" "${f}" >&2
	done
}

# ---------------------------------------------------------------------------------------------
# features

# feature_cmd LIBS ARGS... runs kafka-tools' FeatureCommand from the jars in LIBS.
feature_cmd() {
	local libs="$1"
	shift
	java -Xmx256m -XX:+UseSerialGC -cp "${libs}/*" org.apache.kafka.tools.FeatureCommand "$@"
}

# ensure_share_groups BOOTSTRAP LIBS upgrades the cluster's share.version feature to the highest
# level the brokers support when it is finalized below 1 (share groups off); a no-op otherwise.
ensure_share_groups() {
	local bootstrap="$1" libs="$2" out line supported finalized
	if ! out="$(feature_cmd "${libs}" --bootstrap-server "${bootstrap}" describe 2>&1)"; then
		echo "${out}" | tail -n 5 >&2
		die "could not describe the features of ${bootstrap} (kafka-tools FeatureCommand)"
	fi
	line="$(grep -E '^Feature: share\.version[[:space:]]' <<<"${out}" || true)"
	if [[ -z "${line}" ]]; then
		log "Kafka ${KAFKA_VERSION} at ${bootstrap} has no share.version feature: no share groups"
		return 0
	fi
	supported="$(sed -E 's/.*SupportedMaxVersion: *([0-9]+).*/\1/' <<<"${line}")"
	finalized="$(sed -E 's/.*FinalizedVersionLevel: *([0-9]+).*/\1/' <<<"${line}")"
	[[ "${supported}" =~ ^[0-9]+$ ]] || die "cannot read share.version's supported level from: ${line}"
	[[ "${finalized}" =~ ^[0-9]+$ ]] || finalized=0
	if ((finalized >= 1)); then
		return 0
	fi
	if ((supported < 1)); then
		log "Kafka ${KAFKA_VERSION} at ${bootstrap} supports share.version 0 only: no share groups"
		return 0
	fi
	log "share groups are off at ${bootstrap} (share.version ${finalized}); upgrading share.version to ${supported}"
	if ! out="$(feature_cmd "${libs}" --bootstrap-server "${bootstrap}" upgrade \
		--feature "share.version=${supported}" 2>&1)"; then
		echo "${out}" | tail -n 5 >&2
		die "could not upgrade share.version at ${bootstrap}"
	fi
	log "share.version is ${supported} at ${bootstrap}: share groups are on"
}

# ---------------------------------------------------------------------------------------------
# start

# users_ok LIST: LIST is empty or "user:password,..." with names and passwords of [A-Za-z0-9._-].
users_ok() {
	[[ -z "$1" || "$1" =~ ^[A-Za-z0-9._-]+:[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+:[A-Za-z0-9._-]+)*$ ]]
}

# check_sasl_ssl validates the SASL_SSL settings before anything is written or started.
check_sasl_ssl() {
	[[ -n "${SASL_SSL_PORT}" ]] || return 0
	[[ "${SASL_SSL_PORT}" =~ ^[0-9]+$ ]] || die "KBR_KAFKA_SASL_SSL_PORT must be a port number, got '${SASL_SSL_PORT}'"
	[[ -n "${KBR_KAFKA_SSL_KEYSTORE_PEM:-}" && -r "${KBR_KAFKA_SSL_KEYSTORE_PEM}" ]] ||
		die "KBR_KAFKA_SASL_SSL_PORT needs KBR_KAFKA_SSL_KEYSTORE_PEM, a readable PEM file with the broker's key and certificate"
	if [[ -n "${KBR_KAFKA_SSL_TRUSTSTORE_PEM:-}" && ! -r "${KBR_KAFKA_SSL_TRUSTSTORE_PEM}" ]]; then
		die "KBR_KAFKA_SSL_TRUSTSTORE_PEM ${KBR_KAFKA_SSL_TRUSTSTORE_PEM} is not readable"
	fi
	[[ "${SASL_MECHANISMS}" =~ ^(PLAIN|SCRAM-SHA-256|SCRAM-SHA-512|OAUTHBEARER)(,(PLAIN|SCRAM-SHA-256|SCRAM-SHA-512|OAUTHBEARER))*$ ]] ||
		die "KBR_KAFKA_SASL_MECHANISMS must list PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER, got '${SASL_MECHANISMS}'"
	users_ok "${KBR_KAFKA_SASL_PLAIN_USERS:-}" || die "KBR_KAFKA_SASL_PLAIN_USERS must be user:password,... of [A-Za-z0-9._-]"
	users_ok "${KBR_KAFKA_SASL_SCRAM_USERS:-}" || die "KBR_KAFKA_SASL_SCRAM_USERS must be user:password,... of [A-Za-z0-9._-]"
	case "${KBR_KAFKA_SSL_CLIENT_AUTH:-none}" in
	none | requested | required) ;;
	*) die "KBR_KAFKA_SSL_CLIENT_AUTH must be none, requested or required" ;;
	esac
}

# sasl_ssl_properties prints the server.properties lines of the SASL_SSL listener.
sasl_ssl_properties() {
	local l="listener.name.sasl_ssl" plain_users="" pair
	local -a pairs=()
	IFS=, read -r -a pairs <<<"${KBR_KAFKA_SASL_PLAIN_USERS:-}"
	for pair in ${pairs[@]+"${pairs[@]}"}; do
		plain_users+=" user_${pair%%:*}=\"${pair#*:}\""
	done
	cat <<EOF

# SASL_SSL listener (KBR_KAFKA_SASL_SSL_PORT).
sasl.enabled.mechanisms=${SASL_MECHANISMS}
${l}.sasl.enabled.mechanisms=${SASL_MECHANISMS}
${l}.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required${plain_users};
${l}.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
${l}.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
${l}.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
${l}.ssl.keystore.type=PEM
${l}.ssl.keystore.location=${KBR_KAFKA_SSL_KEYSTORE_PEM}
${l}.ssl.client.auth=${KBR_KAFKA_SSL_CLIENT_AUTH:-none}
EOF
	if [[ -n "${KBR_KAFKA_SSL_TRUSTSTORE_PEM:-}" ]]; then
		echo "${l}.ssl.truststore.type=PEM"
		echo "${l}.ssl.truststore.location=${KBR_KAFKA_SSL_TRUSTSTORE_PEM}"
	fi
}

write_properties() {
	mkdir -p "${STATE_DIR}" "${DATA_DIR}" "${LOG_DIR}"
	local listeners="PLAINTEXT://${HOST}:${PORT},CONTROLLER://${HOST}:${CONTROLLER_PORT}"
	local advertised="PLAINTEXT://${HOST}:${ADVERTISED_PORT}"
	local protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
	if [[ -n "${SASL_SSL_PORT}" ]]; then
		listeners+=",SASL_SSL://${HOST}:${SASL_SSL_PORT}"
		advertised+=",SASL_SSL://${HOST}:${SASL_SSL_PORT}"
		protocols+=",SASL_SSL:SASL_SSL"
	fi
	# With the SASL_SSL listener the file holds PLAIN passwords: only the owner may read it.
	if [[ -n "${SASL_SSL_PORT}" ]]; then
		(umask 077 && : >"${PROPS}.tmp")
	fi
	cat >"${PROPS}.tmp" <<EOF
# Generated by resources/kafka.sh; rewritten on every start.
# A combined broker+controller node, KRaft, static quorum, loopback only.
process.roles=broker,controller
node.id=${NODE_ID}
controller.quorum.voters=${VOTERS}
listeners=${listeners}
advertised.listeners=${advertised}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=${protocols}
log.dirs=${DATA_DIR}

# Internal topics have KBR_KAFKA_INTERNAL_RF replicas (1 on a single node); one in sync is enough.
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=${INTERNAL_RF}
transaction.state.log.replication.factor=${INTERNAL_RF}
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=${INTERNAL_RF}
share.coordinator.state.topic.min.isr=1

# Tuned for tests: topics only exist when a test creates them, groups rebalance at once,
# internal topics are small so the first group or transaction is set up quickly.
auto.create.topics.enable=false
delete.topic.enable=true
group.initial.rebalance.delay.ms=0
# Both group protocols: classic and consumer (KIP-848, group_protocol: consumer). Kafka 4.x
# enables both by default; written out so that a group_protocol: consumer test never depends on
# it. Consumer-protocol members get the broker's session timing (group.consumer.session.timeout.ms
# 45s, group.consumer.heartbeat.interval.ms 5s, the defaults).
group.coordinator.rebalance.protocols=classic,consumer
offsets.topic.num.partitions=4
transaction.state.log.num.partitions=4
share.coordinator.state.topic.num.partitions=4
# Share groups: tests shorten a group's acquisition lock (the group config
# share.record.lock.duration.ms) to a few seconds, so a killed member's records come back
# quickly; the broker refuses a lock below this floor (15 s by default).
group.share.min.record.lock.duration.ms=1000
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
log.cleaner.dedupe.buffer.size=16777216
log.retention.check.interval.ms=30000
log.segment.bytes=67108864
log.segment.delete.delay.ms=1000
EOF
	if [[ "${VOTERS}" == *,* ]]; then
		cat >>"${PROPS}.tmp" <<EOF

# Several voters: a killed broker is fenced (its partitions lose their leader) within 3s.
broker.session.timeout.ms=3000
broker.heartbeat.interval.ms=500

# Follower fetching (KIP-392): every node is a rack of its own, and a leader points a fetch
# that names a rack at the in-sync replica in that rack, so tests with rack_id read from a
# replica in their rack.
broker.rack=rack-${NODE_ID}
replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector
EOF
	fi
	if [[ -n "${SASL_SSL_PORT}" ]]; then
		sasl_ssl_properties >>"${PROPS}.tmp"
	fi
	if [[ -n "${KBR_KAFKA_EXTRA_CONFIG:-}" ]]; then
		printf '\n# KBR_KAFKA_EXTRA_CONFIG\n%s\n' "${KBR_KAFKA_EXTRA_CONFIG}" >>"${PROPS}.tmp"
	fi
	mv "${PROPS}.tmp" "${PROPS}"
}

readonly JVM_OPTS=(
	-Xms"${HEAP_MIN}" -Xmx"${HEAP_MAX}" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true
	-Dkafka.logs.dir="${LOG_DIR}" -Dlog4j2.configurationFile="${LOG4J_CONFIG}"
	-cp "${LIBS_DIR}/*"
)

java_cmd() {
	java "${JVM_OPTS[@]}" "$@"
}

format_storage() {
	if [[ -f "${DATA_DIR}/meta.properties" ]]; then
		return 0
	fi
	local cluster_id
	if [[ -n "${KBR_KAFKA_CLUSTER_ID:-}" ]]; then
		echo "${KBR_KAFKA_CLUSTER_ID}" >"${CLUSTER_ID_FILE}"
	elif [[ ! -s "${CLUSTER_ID_FILE}" ]]; then
		java_cmd kafka.tools.StorageTool random-uuid 2>>"${LOG_DIR}/stdout.log" | tail -n 1 >"${CLUSTER_ID_FILE}"
	fi
	cluster_id="$(cat "${CLUSTER_ID_FILE}")"
	[[ "${cluster_id}" =~ ^[A-Za-z0-9_-]{22}$ ]] || die "bad cluster id '${cluster_id}' from StorageTool random-uuid"
	# SCRAM users of the SASL_SSL listener are bootstrapped into the metadata log.
	local scram=() pair mech
	local -a pairs=()
	if [[ -n "${SASL_SSL_PORT}" ]]; then
		IFS=, read -r -a pairs <<<"${KBR_KAFKA_SASL_SCRAM_USERS:-}"
	fi
	for pair in ${pairs[@]+"${pairs[@]}"}; do
		for mech in SCRAM-SHA-256 SCRAM-SHA-512; do
			scram+=(--add-scram "${mech}=[name=${pair%%:*},password=${pair#*:}]")
		done
	done
	log "formatting ${DATA_DIR} (cluster id ${cluster_id})"
	if ! java_cmd kafka.tools.StorageTool format -t "${cluster_id}" -c "${PROPS}" ${scram[@]+"${scram[@]}"} \
		>>"${LOG_DIR}/stdout.log" 2>&1; then
		show_logs 50
		die "formatting the storage failed"
	fi
}

cmd_start() {
	lock
	local pid
	if pid="$(our_pid)"; then
		if answers_kafka; then
			log "broker already running (pid ${pid})"
			single_voter && check_share_groups
			echo "${HOST}:${PORT}"
			return 0
		fi
		log "broker pid ${pid} runs but does not answer on ${HOST}:${PORT}; restarting it"
		stop_locked
	fi
	require_cmd java "install Java 17+, e.g. apt-get install -y openjdk-17-jre-headless"
	check_sasl_ssl
	for p in "${PORT}" "${CONTROLLER_PORT}" ${SASL_SSL_PORT}; do
		if port_open "${p}"; then
			die "${HOST}:${p} is already in use by another process; set KBR_KAFKA_PORT / KBR_KAFKA_CONTROLLER_PORT / KBR_KAFKA_SASL_SSL_PORT"
		fi
	done
	libs_complete || cmd_fetch

	write_properties
	format_storage
	# A fresh server.log per start, so the "started" line we wait for is from this run.
	[[ -f "${LOG_DIR}/server.log" ]] && mv -f "${LOG_DIR}/server.log" "${LOG_DIR}/server.log.1"
	[[ -f "${LOG_DIR}/stdout.log" ]] && mv -f "${LOG_DIR}/stdout.log" "${LOG_DIR}/stdout.log.1"

	local started deadline
	started=$(date +%s)
	# setsid: the broker outlives the shell (and its process group) that started it.
	# In a non-interactive shell the child is no group leader, so setsid and nohup exec in
	# place and $! is the JVM's pid.
	# 9>&-: the broker must not inherit (and so hold forever) the lock on fd 9.
	setsid nohup java "${JVM_OPTS[@]}" kafka.Kafka "${PROPS}" </dev/null >"${LOG_DIR}/stdout.log" 2>&1 9>&- &
	pid=$!
	echo "${pid}" >"${PID_FILE}"
	log "started broker pid ${pid}; waiting up to ${START_TIMEOUT}s for ${HOST}:${PORT}"

	deadline=$((started + START_TIMEOUT))
	while :; do
		if ! kill -0 "${pid}" 2>/dev/null; then
			rm -f "${PID_FILE}"
			show_logs 50
			die "broker exited during startup"
		fi
		if started_logged && answers_kafka; then
			break
		fi
		if (($(date +%s) >= deadline)); then
			show_logs 50
			stop_locked
			die "broker did not come up within ${START_TIMEOUT}s"
		fi
		sleep 0.5
	done
	is_ours "${pid}" || die "pid ${pid} is not the kafka.Kafka process we expected"
	log "broker up in $(($(date +%s) - started))s (pid ${pid}, state ${STATE_DIR})"
	# A cluster's features are set once every node answers (cluster-start).
	single_voter && check_share_groups
	echo "${HOST}:${PORT}"
}

# check_share_groups makes sure a single broker serves share groups, unless it advertises a
# proxy's port (KBR_KAFKA_ADVERTISED_PORT): FeatureCommand would connect there.
check_share_groups() {
	if [[ "${ADVERTISED_PORT}" != "${PORT}" ]]; then
		log "advertised at ${HOST}:${ADVERTISED_PORT} (a proxy's): share groups not checked"
		return 0
	fi
	ensure_share_groups "${HOST}:${PORT}" "${LIBS_DIR}"
}

# single_voter: this node is the only voter of its quorum (the single broker, not a cluster node).
single_voter() {
	[[ "${VOTERS}" != *,* ]]
}

# ---------------------------------------------------------------------------------------------
# stop, status, reset, logs

stop_locked() {
	local pid
	if ! pid="$(our_pid)"; then
		log "broker not running"
		return 0
	fi
	log "stopping broker pid ${pid}"
	kill -TERM "${pid}" 2>/dev/null || true
	local waited=0
	while is_ours "${pid}" && ((waited < STOP_TIMEOUT * 10)); do
		sleep 0.1
		waited=$((waited + 1))
	done
	if is_ours "${pid}"; then
		log "broker pid ${pid} still running after ${STOP_TIMEOUT}s; sending SIGKILL"
		kill -KILL "${pid}" 2>/dev/null || true
		while is_ours "${pid}"; do sleep 0.1; done
	fi
	rm -f "${PID_FILE}"
	log "broker stopped"
}

cmd_stop() {
	lock
	stop_locked
}

# cmd_kill crashes our broker: SIGKILL, no shutdown, as a machine failure would.
cmd_kill() {
	lock
	local pid
	if ! pid="$(our_pid)"; then
		log "broker not running"
		return 0
	fi
	log "killing broker pid ${pid} (SIGKILL)"
	kill -KILL "${pid}" 2>/dev/null || true
	while is_ours "${pid}"; do sleep 0.1; done
	# The JVM's memory goes before its sockets: wait (up to 10s) until its listener is closed too.
	local waited=0
	while port_open "${PORT}" && ((waited < 100)); do
		sleep 0.1
		waited=$((waited + 1))
	done
	rm -f "${PID_FILE}"
	log "broker killed"
}

cmd_status() {
	local pid
	if ! pid="$(our_pid 2>/dev/null)"; then
		echo "stopped"
		return 1
	fi
	if answers_kafka; then
		echo "running pid=${pid} bootstrap=${HOST}:${PORT} state=${STATE_DIR}"
		return 0
	fi
	echo "not answering pid=${pid} bootstrap=${HOST}:${PORT}"
	return 1
}

cmd_reset() {
	lock
	stop_locked
	rm -rf "${STATE_DIR}"
	log "deleted ${STATE_DIR} (jars kept in ${LIBS_DIR})"
}

cmd_logs() {
	if [[ "${1:-}" == "-f" ]]; then
		exec tail -n 100 -F "${LOG_DIR}/server.log" "${LOG_DIR}/stdout.log"
	fi
	show_logs 100 2>&1
}

# ---------------------------------------------------------------------------------------------
# cluster

# check_cluster validates the cluster settings.
check_cluster() {
	[[ "${CLUSTER_NODES}" =~ ^[1-9][0-9]?$ ]] || die "KBR_KAFKA_CLUSTER_NODES must be 1-99, got '${CLUSTER_NODES}'"
	[[ "${CLUSTER_PORT}" =~ ^[0-9]+$ ]] || die "KBR_KAFKA_CLUSTER_PORT must be a port number, got '${CLUSTER_PORT}'"
}

# node_env I prints the environment of cluster node I (1-based).
node_env() {
	local i="$1" n voters="" port
	[[ "${i}" =~ ^[0-9]+$ ]] && ((i >= 1 && i <= CLUSTER_NODES)) || die "node must be 1-${CLUSTER_NODES}, got '${i}'"
	for ((n = 1; n <= CLUSTER_NODES; n++)); do
		voters+="${voters:+,}${n}@${HOST}:$((CLUSTER_PORT + 2 * (n - 1) + 1))"
	done
	port=$((CLUSTER_PORT + 2 * (i - 1)))
	echo "KBR_KAFKA_HOME=${CLUSTER_HOME}/node-${i}"
	echo "KBR_KAFKA_PORT=${port}"
	echo "KBR_KAFKA_CONTROLLER_PORT=$((port + 1))"
	echo "KBR_KAFKA_NODE_ID=${i}"
	echo "KBR_KAFKA_VOTERS=${voters}"
	echo "KBR_KAFKA_INTERNAL_RF=$((CLUSTER_NODES < 3 ? CLUSTER_NODES : 3))"
	echo "KBR_KAFKA_HEAP_MIN=${KBR_KAFKA_HEAP_MIN:-256m}"
	echo "KBR_KAFKA_HEAP_MAX=${KBR_KAFKA_HEAP_MAX:-256m}"
}

# on_node I CMD...: runs this script with CMD on cluster node I.
on_node() {
	local i="$1" line
	shift
	local -a env=()
	while IFS= read -r line; do env+=("${line}"); done < <(node_env "${i}")
	env "${env[@]}" "${BASH_SOURCE[0]}" "$@"
}

cluster_address() {
	local i out=""
	for ((i = 1; i <= CLUSTER_NODES; i++)); do
		out+="${out:+,}${HOST}:$((CLUSTER_PORT + 2 * (i - 1)))"
	done
	echo "${out}"
}

cmd_cluster_start() {
	check_cluster
	mkdir -p "${CLUSTER_HOME}"
	# One set of jars, fetched once into the default home, linked into every node's home.
	local libs="${DEFAULT_HOME}/libs" i
	KBR_KAFKA_HOME="${DEFAULT_HOME}" "${BASH_SOURCE[0]}" fetch
	# Every node formats its storage with the cluster's one id.
	if [[ ! -s "${CLUSTER_HOME}/cluster.id" ]]; then
		java -cp "${libs}/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1 >"${CLUSTER_HOME}/cluster.id.tmp"
		mv "${CLUSTER_HOME}/cluster.id.tmp" "${CLUSTER_HOME}/cluster.id"
	fi
	local id
	id="$(cat "${CLUSTER_HOME}/cluster.id")"
	local -a pids=()
	for ((i = 1; i <= CLUSTER_NODES; i++)); do
		mkdir -p "${CLUSTER_HOME}/node-${i}"
		[[ -e "${CLUSTER_HOME}/node-${i}/libs" ]] || ln -s "${libs}" "${CLUSTER_HOME}/node-${i}/libs"
		KBR_KAFKA_CLUSTER_ID="${id}" on_node "${i}" start >/dev/null &
		pids+=($!)
	done
	local failed=0
	for i in "${!pids[@]}"; do
		wait "${pids[${i}]}" || { log "node $((i + 1)) did not start"; failed=1; }
	done
	((failed == 0)) || die "the cluster did not come up (cluster-status says which node runs)"
	ensure_share_groups "$(cluster_address)" "${libs}"
	cluster_address
}

# cmd_cluster_each CMD runs CMD on every node: status one after the other, stop and reset
# concurrently (the last nodes of a KRaft quorum shut down cleanly only while a majority runs).
cmd_cluster_each() {
	check_cluster
	local cmd="$1" i rc=0 line
	local -a pids=()
	for ((i = 1; i <= CLUSTER_NODES; i++)); do
		if [[ "${cmd}" == status ]]; then
			line="$(on_node "${i}" status 2>/dev/null)" || rc=1
			echo "node ${i}: ${line}"
		else
			on_node "${i}" "${cmd}" &
			pids+=($!)
		fi
	done
	for i in "${!pids[@]}"; do
		wait "${pids[${i}]}" || rc=1
	done
	if [[ "${cmd}" == reset && ${rc} -eq 0 ]]; then
		rm -f "${CLUSTER_HOME}/cluster.id"
	fi
	return "${rc}"
}

# ---------------------------------------------------------------------------------------------
# proxied broker (bench -mode wan)

# wan_env prints the environment of the proxied broker.
wan_env() {
	[[ "${WAN_PORT}" =~ ^[0-9]+$ ]] || die "KBR_KAFKA_WAN_PORT must be a port number, got '${WAN_PORT}'"
	echo "KBR_KAFKA_HOME=${WAN_HOME}"
	echo "KBR_KAFKA_PORT=${WAN_PORT}"
	echo "KBR_KAFKA_CONTROLLER_PORT=$((WAN_PORT + 1))"
	echo "KBR_KAFKA_ADVERTISED_PORT=$((WAN_PORT + 2))"
}

# on_wan CMD...: runs this script with CMD on the proxied broker.
on_wan() {
	local line
	local -a env=()
	while IFS= read -r line; do env+=("${line}"); done < <(wan_env)
	env "${env[@]}" "${BASH_SOURCE[0]}" "$@"
}

cmd_wan_start() {
	local libs="${DEFAULT_HOME}/libs"
	KBR_KAFKA_HOME="${DEFAULT_HOME}" "${BASH_SOURCE[0]}" fetch
	mkdir -p "${WAN_HOME}"
	[[ -e "${WAN_HOME}/libs" ]] || ln -s "${libs}" "${WAN_HOME}/libs"
	on_wan start
}

usage() {
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
}

main() {
	local cmd="${1:-}"
	shift || true
	case "${cmd}" in
	fetch) lock; cmd_fetch ;;
	start) cmd_start ;;
	stop) cmd_stop ;;
	restart) cmd_stop; cmd_start ;;
	status) cmd_status ;;
	reset) cmd_reset ;;
	logs) cmd_logs "$@" ;;
	address) echo "${HOST}:${PORT}" ;;
	kill) cmd_kill ;;
	cluster-start) cmd_cluster_start ;;
	cluster-stop) cmd_cluster_each stop ;;
	cluster-status) cmd_cluster_each status ;;
	cluster-reset) cmd_cluster_each reset ;;
	cluster-address) check_cluster; cluster_address ;;
	cluster-env) check_cluster; node_env "${1:-}" ;;
	wan-start) cmd_wan_start ;;
	wan-stop) on_wan stop ;;
	wan-status) on_wan status ;;
	wan-reset) on_wan reset ;;
	wan-env) wan_env ;;
	-h | --help | help) usage ;;
	*) usage >&2; exit 2 ;;
	esac
}

main "$@"
