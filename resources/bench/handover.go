package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The handover mode: for every group protocol in -protocols, -members continuous input members
// read a fresh topic while one record is produced every -interval (its value the produce time, as
// in the latency mode); after a steady -phase a member joins, after another one the first member
// leaves with SIGTERM, after another one (with -kill) the second member is SIGKILLed and the run
// goes on for -kill-phase (longer than the session timeout, so its partitions move). Every
// member writes its own file; a value seen in a second line (in any member's file) is a duplicate,
// counted for the graceful moves when it was seen before the kill and for the kill after it.
// For the join and the leave it also splits the records produced in the phase by partition: those
// of partitions that stayed with their member (what a rebalance costs the members that keep their
// partitions: a group-wide barrier shows there) and those of partitions that moved.

var (
	assignedLog = regexp.MustCompile(`assigned \d+ partitions to this member`)
	protocolLog = regexp.MustCompile(`this member runs the (\w+) group protocol`)
)

// delivery is one line of one member's output file: a record value and when it was read.
type delivery struct {
	ns     int64 // the value: the record's produce time in unix nanoseconds
	member string
	at     time.Time
}

// phase is one part of a run: from start until the next phase's start.
type phase struct {
	name  string
	start time.Time
}

// handoverSummary is what one protocol showed over one run.
type handoverSummary struct {
	produced     int
	latencies    []time.Duration            // first delivery of each produced record seen, sorted
	beforeKill   []time.Duration            // the same of the records produced before the kill
	byPhase      map[string][]time.Duration // the same per phase the records were produced in
	dupsGraceful int                        // deliveries again seen before killAt
	dupsKill     int                        // deliveries again seen at or after killAt
	// kept and moved split byPhase for the phases after the first: the records of the partitions
	// whose records produced in the phase were all first delivered by the member that delivered
	// the partition's last record produced before it (what a rebalance costs the members that
	// keep their partitions), and those of the other partitions (the moved ones).
	kept, moved map[string][]time.Duration
}

// summarize takes the produced values (the i-th produced to partition i % partitions), every
// member's deliveries and the phases (in order) and returns the latency of each record's first
// delivery (over the run, before the kill and per phase the record was produced in, and in the
// phases after the first per kept or moved partition), and the deliveries again, split at killAt
// (zero: no kill, all graceful). Values not produced (the primer, partial lines) are ignored.
func summarize(produced []int64, partitions int, ds []delivery, phases []phase, killAt time.Time) handoverSummary {
	s := handoverSummary{produced: len(produced), byPhase: map[string][]time.Duration{},
		kept: map[string][]time.Duration{}, moved: map[string][]time.Duration{}}
	first := map[int64]delivery{} // each value's first delivery
	for _, d := range ds {
		if f, ok := first[d.ns]; !ok || d.at.Before(f.at) {
			first[d.ns] = d
		}
	}
	// owner[p] is the member that first delivered p's latest record produced before the current
	// phase; moved[p] whether a record of p produced in it was first delivered by another one.
	owner, ownerNext := map[int]string{}, map[int]string{}
	movedIn := map[int]bool{}
	var phaseLats map[int][]time.Duration
	cur := ""
	flush := func() {
		if cur != "" && cur != phases[0].name {
			for p, ls := range phaseLats {
				if movedIn[p] {
					s.moved[cur] = append(s.moved[cur], ls...)
				} else {
					s.kept[cur] = append(s.kept[cur], ls...)
				}
			}
		}
		for p, m := range ownerNext {
			owner[p] = m
		}
		phaseLats, movedIn = map[int][]time.Duration{}, map[int]bool{}
	}
	for i, ns := range produced {
		ph := phaseOf(phases, time.Unix(0, ns))
		if ph != cur {
			flush()
			cur = ph
		}
		f, ok := first[ns]
		if !ok || partitions <= 0 {
			continue
		}
		p := i % partitions
		if o, known := owner[p]; !known || o != f.member {
			movedIn[p] = true
		}
		ownerNext[p] = f.member
		phaseLats[p] = append(phaseLats[p], f.at.Sub(time.Unix(0, ns)))
	}
	flush()
	byValue := map[int64][]time.Time{}
	want := map[int64]bool{}
	for _, ns := range produced {
		want[ns] = true
	}
	for _, d := range ds {
		if want[d.ns] {
			byValue[d.ns] = append(byValue[d.ns], d.at)
		}
	}
	for _, ns := range produced {
		ats := byValue[ns]
		if len(ats) == 0 {
			continue
		}
		slices.SortFunc(ats, func(a, b time.Time) int { return a.Compare(b) })
		lat := ats[0].Sub(time.Unix(0, ns))
		s.latencies = append(s.latencies, lat)
		if killAt.IsZero() || time.Unix(0, ns).Before(killAt) {
			s.beforeKill = append(s.beforeKill, lat)
		}
		if ph := phaseOf(phases, time.Unix(0, ns)); ph != "" {
			s.byPhase[ph] = append(s.byPhase[ph], lat)
		}
		for _, at := range ats[1:] {
			if !killAt.IsZero() && !at.Before(killAt) {
				s.dupsKill++
			} else {
				s.dupsGraceful++
			}
		}
	}
	slices.Sort(s.latencies)
	slices.Sort(s.beforeKill)
	for _, m := range []map[string][]time.Duration{s.byPhase, s.kept, s.moved} {
		for _, ls := range m {
			slices.Sort(ls)
		}
	}
	return s
}

// phaseOf names the last phase started at or before t ("" before the first).
func phaseOf(phases []phase, t time.Time) string {
	name := ""
	for _, p := range phases {
		if p.start.After(t) {
			break
		}
		name = p.name
	}
	return name
}

// handoverRun is one protocol's run: the summary and the times measured on the processes.
type handoverRun struct {
	protocol                    string
	sum                         handoverSummary
	joinAssigned, joinFirst     time.Duration // from the joiner's start to its first assignment, first record
	leaveExit                   time.Duration // from SIGTERM to the leaving member's exit
	killed                      bool
	phaseDur, killDur, interval time.Duration
}

// protocolFields returns the input fields of a -protocols entry: "consumer" or
// "classic:<balancer>".
func protocolFields(p string) (string, error) {
	switch {
	case p == "consumer":
		return "group_protocol: consumer", nil
	case strings.HasPrefix(p, "classic:") && len(p) > len("classic:"):
		return fmt.Sprintf("group_protocol: classic\ngroup_balancers: [ %s ]", strings.TrimPrefix(p, "classic:")), nil
	}
	return "", fmt.Errorf("-protocols: an entry is consumer or classic:<balancer>, got %q", p)
}

func runHandover(o options) error {
	ctx := context.Background()
	if o.members < 1 || o.kill && o.members < 2 {
		return fmt.Errorf("-members must be at least 1 (2 with -kill), got %d", o.members)
	}
	for _, p := range o.protocols {
		if _, err := protocolFields(p); err != nil {
			return err
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds(o.brokers)...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	dir, err := os.MkdirTemp("", "kbr-handover")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	var runs []handoverRun
	for _, p := range o.protocols {
		topic := fmt.Sprintf("kbr-handover-%s-%d", slug(p), time.Now().UnixNano())
		if err := createTopic(ctx, adm, topic, o.partitions); err != nil {
			return err
		}
		if err := prime(ctx, cl, adm, topic, o.partitions); err != nil {
			cleanup(adm, topic, topic)
			return fmt.Errorf("%s: %w", p, err)
		}
		r, err := measureHandover(ctx, o, cl, dir, p, topic)
		cleanup(adm, topic, topic)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		runs = append(runs, r)
		s := r.sum
		fmt.Fprintf(os.Stderr, "%-28s seen %d of %d, p50 %s p99 %s max %s (before the kill p99 %s max %s), duplicates graceful %d kill %d, join: assigned %s first record %s, leave %s\n",
			p, len(s.latencies), s.produced, fmtDur(pct(s.latencies, 0.5)), fmtDur(pct(s.latencies, 0.99)), fmtDur(pct(s.latencies, 1)),
			fmtDur(pct(s.beforeKill, 0.99)), fmtDur(pct(s.beforeKill, 1)), s.dupsGraceful, s.dupsKill, fmtDur(r.joinAssigned), fmtDur(r.joinFirst), fmtDur(r.leaveExit))
	}
	printHandover(o, runs)
	return nil
}

// fmtSince prints a time measured on a process, "-" when it never came.
func fmtSince(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmtDur(d)
}

func printHandover(o options, runs []handoverRun) {
	kill := "no kill"
	if o.kill {
		kill = fmt.Sprintf("then the second SIGKILLed and %s more", o.killPhase)
	}
	fmt.Printf("\nhandover: %d partitions, one record every %s round-robin; %d members, after %s a member joins, after %s more the first leaves (SIGTERM), %s; connect %s; input extra %q\n\n",
		o.partitions, o.interval, o.members, o.phase, o.phase, kill, o.connect, o.inputExtra)
	fmt.Println("| protocol | seen / produced | p50 | p99 | max | before the kill: p99 / max | max by phase: steady / join / leave / kill | join: max kept / moved partitions | leave: max kept / moved partitions | duplicates graceful | duplicates kill | join → assigned | join → first record | leave: SIGTERM → exit |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range runs {
		s := r.sum
		killDups := "-"
		phaseMax := []string{fmtDur(pct(s.byPhase["steady"], 1)), fmtDur(pct(s.byPhase["join"], 1)), fmtDur(pct(s.byPhase["leave"], 1)), "-"}
		if r.killed {
			killDups = strconv.Itoa(s.dupsKill)
			phaseMax[3] = fmtDur(pct(s.byPhase["kill"], 1))
		}
		keptMoved := func(ph string) string {
			return fmt.Sprintf("%s (%d) / %s (%d)", fmtDur(pct(s.kept[ph], 1)), len(s.kept[ph]), fmtDur(pct(s.moved[ph], 1)), len(s.moved[ph]))
		}
		fmt.Printf("| %s | %d / %d | %s | %s | %s | %s / %s | %s | %s | %s | %d | %s | %s | %s | %s |\n", r.protocol, len(s.latencies), s.produced,
			fmtDur(pct(s.latencies, 0.5)), fmtDur(pct(s.latencies, 0.99)), fmtDur(pct(s.latencies, 1)),
			fmtDur(pct(s.beforeKill, 0.99)), fmtDur(pct(s.beforeKill, 1)), strings.Join(phaseMax, " / "), keptMoved("join"), keptMoved("leave"),
			s.dupsGraceful, killDups, fmtSince(r.joinAssigned), fmtSince(r.joinFirst), fmtSince(r.leaveExit))
	}
}

// member is one input process of a handover run and the lines its file showed.
type member struct {
	*child
	started time.Time
	tl      *tailer
}

// measureHandover runs one protocol's members on topic (group: the topic's name) through the
// phases and summarizes what their files showed.
func measureHandover(ctx context.Context, o options, cl *kgo.Client, dir, protocol, topic string) (handoverRun, error) {
	fields, _ := protocolFields(protocol)
	if o.inputExtra != "" {
		fields += "\n" + o.inputExtra
	}
	wantProtocol := strings.SplitN(protocol, ":", 2)[0]
	var (
		mu         sync.Mutex // guards deliveries
		deliveries []delivery
		members    []*member
	)
	defer func() {
		for _, m := range members {
			m.stop()
			m.tl.Close()
		}
	}()
	start := func(name string) (*member, error) {
		c, err := startInputLogging(o, dir, topic+"-"+name, topic, topic, fields, "info")
		if err != nil {
			return nil, err
		}
		m := &member{child: c, started: time.Now()}
		m.tl = newTailer(c.out, func(line []byte, at time.Time) {
			ns, err := strconv.ParseInt(string(line), 10, 64)
			if err != nil {
				return
			}
			mu.Lock()
			deliveries = append(deliveries, delivery{ns: ns, member: name, at: at})
			mu.Unlock()
		})
		members = append(members, m)
		return m, nil
	}
	// running checks that none of the members still meant to run exited.
	gone := map[*member]bool{}
	running := func() error {
		for _, m := range members {
			if !gone[m] {
				if err := m.exited(); err != nil {
					return err
				}
			}
		}
		return nil
	}
	// wait sleeps for d, checking the members and calling poll every 20ms.
	wait := func(d time.Duration, poll func()) error {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if err := running(); err != nil {
				return err
			}
			if poll != nil {
				poll()
			}
		}
		return running()
	}

	for i := range o.members {
		if _, err := start(fmt.Sprintf("m%d", i+1)); err != nil {
			return handoverRun{}, err
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		all := true
		for _, m := range members {
			all = all && assignedLog.MatchString(m.stderr.String())
		}
		if all {
			break
		}
		if err := running(); err != nil {
			return handoverRun{}, err
		}
		if time.Now().After(deadline) {
			return handoverRun{}, fmt.Errorf("not every member assigned partitions within 2 minutes: %s", tail(members[0].stderr.String(), 2000))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, m := range members {
		if got := protocolLog.FindStringSubmatch(m.stderr.String()); got == nil || got[1] != wantProtocol {
			return handoverRun{}, fmt.Errorf("%s does not log that it runs the %s group protocol: %s", m.name, wantProtocol, tail(m.stderr.String(), 2000))
		}
	}
	if err := wait(o.warmup, nil); err != nil {
		return handoverRun{}, err
	}

	// The producer: one record every o.interval until stopProducing is closed.
	var (
		produced      []int64 // written by the producer goroutine, read after it stopped
		perr          = make(chan error, 1)
		stopProducing = make(chan struct{})
		producing     = make(chan struct{})
	)
	go func() {
		defer close(producing)
		tick := time.NewTicker(o.interval)
		defer tick.Stop()
		for i := 0; ; i++ {
			ns := time.Now().UnixNano()
			produced = append(produced, ns)
			cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: int32(i % o.partitions), Value: []byte(strconv.FormatInt(ns, 10))},
				func(_ *kgo.Record, err error) {
					if err != nil {
						select {
						case perr <- err:
						default:
						}
					}
				})
			select {
			case <-stopProducing:
				return
			case <-tick.C:
			}
		}
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			close(stopProducing)
			<-producing
		}
	}
	defer stop()
	checkProduce := func() error {
		select {
		case err := <-perr:
			return fmt.Errorf("produce: %w", err)
		default:
			return nil
		}
	}

	run := handoverRun{protocol: protocol, phaseDur: o.phase, killDur: o.killPhase, interval: o.interval}
	phases := []phase{{"steady", time.Now()}}
	if err := wait(o.phase, nil); err != nil {
		return run, err
	}

	joiner, err := start("joiner")
	if err != nil {
		return run, err
	}
	phases = append(phases, phase{"join", joiner.started})
	pollJoiner := func() {
		if run.joinAssigned == 0 && assignedLog.MatchString(joiner.stderr.String()) {
			run.joinAssigned = time.Since(joiner.started)
		}
	}
	if err := wait(o.phase, pollJoiner); err != nil {
		return run, err
	}

	leaving := members[0]
	gone[leaving] = true
	left := make(chan time.Duration, 1)
	leftAt := time.Now()
	phases = append(phases, phase{"leave", leftAt})
	go func() {
		leaving.stop()
		left <- time.Since(leftAt)
	}()
	if err := wait(o.phase, pollJoiner); err != nil {
		return run, err
	}

	var killAt time.Time
	if o.kill {
		killed := members[1]
		gone[killed] = true
		killAt = time.Now()
		if err := killed.cmd.Process.Kill(); err != nil {
			return run, fmt.Errorf("kill %s: %w", killed.name, err)
		}
		run.killed = true
		phases = append(phases, phase{"kill", killAt})
		if err := wait(o.killPhase, pollJoiner); err != nil {
			return run, err
		}
	}
	stop()
	if err := cl.Flush(ctx); err != nil {
		return run, err
	}
	if err := checkProduce(); err != nil {
		return run, err
	}
	// Drain: wait until every produced record was seen, for up to o.drain.
	for end := time.Now().Add(o.drain); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		seen := map[int64]bool{}
		for _, d := range deliveries {
			seen[d.ns] = true
		}
		mu.Unlock()
		if !slices.ContainsFunc(produced, func(ns int64) bool { return !seen[ns] }) {
			break
		}
	}
	select {
	case run.leaveExit = <-left:
	case <-time.After(30 * time.Second):
		return run, fmt.Errorf("%s did not exit within 30s of SIGTERM", leaving.name)
	}
	if leaving.err != nil {
		return run, fmt.Errorf("%s exited with %v after SIGTERM: %s", leaving.name, leaving.err, tail(leaving.stderr.String(), 2000))
	}
	pollJoiner()
	for _, m := range members {
		m.tl.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	for _, d := range deliveries {
		if d.member == "joiner" && (run.joinFirst == 0 || d.at.Sub(joiner.started) < run.joinFirst) {
			run.joinFirst = d.at.Sub(joiner.started)
		}
	}
	run.sum = summarize(produced, o.partitions, deliveries, phases, killAt)
	return run, nil
}
