package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSummarize feeds summarize five produced records over three phases, delivered by two
// members with a duplicate before the kill, two after it, a value never produced and one record
// never delivered, and expects each record's first delivery as its latency, over the run, before
// the kill and per phase by produce time, and the duplicates split at the kill.
func TestSummarize(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ns := func(ms int) int64 { return at(ms).UnixNano() }
	phases := []phase{{"steady", at(0)}, {"join", at(100)}, {"kill", at(200)}}
	produced := []int64{ns(0), ns(50), ns(120), ns(210), ns(220)}
	ds := []delivery{
		{ns(0), "a", at(2)},
		{ns(50), "a", at(53)},
		{ns(120), "b", at(180)}, // read again by a (graceful): the earlier delivery counts
		{ns(120), "a", at(150)},
		{ns(210), "b", at(215)},
		{ns(210), "a", at(260)}, // again after the kill
		{ns(210), "a", at(261)}, // and again
		{ns(999), "a", at(5)},   // not produced: ignored
		// ns(220) never delivered
	}
	s := summarize(produced, 2, ds, phases, at(200))
	assert.Equal(t, 5, s.produced)
	require.Equal(t, []time.Duration{2 * time.Millisecond, 3 * time.Millisecond, 5 * time.Millisecond, 30 * time.Millisecond}, s.latencies)
	assert.Equal(t, []time.Duration{2 * time.Millisecond, 3 * time.Millisecond, 30 * time.Millisecond}, s.beforeKill)
	assert.Equal(t, map[string][]time.Duration{
		"steady": {2 * time.Millisecond, 3 * time.Millisecond},
		"join":   {30 * time.Millisecond},
		"kill":   {5 * time.Millisecond},
	}, s.byPhase)
	assert.Equal(t, 1, s.dupsGraceful)
	assert.Equal(t, 2, s.dupsKill)
	// Partition 0 (records 0, 2, 4) stays with a; partition 1's record after the kill is b's first.
	assert.Equal(t, map[string][]time.Duration{"join": {30 * time.Millisecond}}, s.kept, "kept partitions' latencies")
	assert.Equal(t, map[string][]time.Duration{"kill": {5 * time.Millisecond}}, s.moved, "moved partitions' latencies")

	noKill := summarize(produced, 2, ds, phases[:2], time.Time{})
	assert.Equal(t, 3, noKill.dupsGraceful, "without a kill every duplicate is a graceful one")
	assert.Zero(t, noKill.dupsKill)
	assert.Equal(t, []time.Duration{5 * time.Millisecond, 30 * time.Millisecond}, noKill.byPhase["join"], "records after the last phase's start belong to it")
	assert.Equal(t, noKill.latencies, noKill.beforeKill, "without a kill every record is before it")
}

// TestSummarizeKeptMoved: in the join phase partition 0 stays with a and partition 1 moves to b;
// the latencies of the phase's records split by partition, the steady phase in neither.
func TestSummarizeKeptMoved(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ns := func(ms int) int64 { return at(ms).UnixNano() }
	phases := []phase{{"steady", at(0)}, {"join", at(100)}}
	produced := []int64{ns(0), ns(10), ns(110), ns(120), ns(130)} // partitions 0, 1, 0, 1, 0
	ds := []delivery{
		{ns(0), "a", at(1)},
		{ns(10), "a", at(12)},
		{ns(110), "a", at(111)},
		{ns(120), "b", at(170)},
		{ns(120), "a", at(180)}, // a duplicate, later: b delivered it first
		{ns(130), "a", at(140)},
	}
	s := summarize(produced, 2, ds, phases, time.Time{})
	assert.Equal(t, map[string][]time.Duration{"join": {time.Millisecond, 10 * time.Millisecond}}, s.kept)
	assert.Equal(t, map[string][]time.Duration{"join": {50 * time.Millisecond}}, s.moved)
}

// TestProtocolFields accepts consumer and classic:<balancer> and rejects anything else.
func TestProtocolFields(t *testing.T) {
	f, err := protocolFields("consumer")
	require.NoError(t, err)
	assert.Equal(t, "group_protocol: consumer", f)
	f, err = protocolFields("classic:range")
	require.NoError(t, err)
	assert.Equal(t, "group_protocol: classic\ngroup_balancers: [ range ]", f)
	for _, bad := range []string{"classic", "classic:", "eager", ""} {
		_, err := protocolFields(bad)
		assert.Errorf(t, err, "protocolFields(%q)", bad)
	}
}
