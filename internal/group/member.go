package group

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// Handler receives a member's assignment changes. The calls come from
// franz-go's group management goroutine, one at a time, and the rebalance
// waits for each. Revoked must commit what it wants kept before it returns.
type Handler interface {
	// Assigned hands the member partitions to read.
	Assigned(ctx context.Context, keys []ranges.Key)
	// Revoked takes partitions away in an orderly rebalance (or when the
	// member leaves). The member may still commit them until it returns.
	Revoked(ctx context.Context, keys []ranges.Key)
	// Lost takes partitions away after the member lost its session. Their
	// commits would be rejected, another member may already read them.
	Lost(ctx context.Context, keys []ranges.Key)
	// Failed says the member cannot go on as configured. It was asked to
	// run the consumer protocol (KIP-848) and franz-go fell back to the
	// classic one, because the coordinator refused it.
	Failed(err error)
}

// Names of the group protocols, as Kafka's group.protocol.
const (
	ProtocolClassic  = "classic"
	ProtocolConsumer = "consumer"
)

// ErrNoConsumerProtocol is the error of a member asked to run the consumer
// group protocol (KIP-848) on a cluster that does not serve it.
var ErrNoConsumerProtocol = errors.New("the cluster does not serve the consumer group protocol (KIP-848: ConsumerGroupHeartbeat v1, Kafka 4.0 or later with consumer in group.coordinator.rebalance.protocols)")

// MemberConfig configures New.
type MemberConfig struct {
	Seeds      []string
	ClientOpts []kgo.Opt // connection options (client ID, TLS, SASL)
	Group      string
	Topics     []string  // topics whose partitions the group shares; Join subscribes to them
	GroupOpts  []kgo.Opt // balancers, session and rebalance timeouts, instance ID
	// Joining, if set, is called with the protocol the member runs
	// (ProtocolClassic or ProtocolConsumer) New checked, by Join before
	// the member starts joining (so before any assignment). With
	// ProtocolConsumer, assignor says which server-side assignor the
	// member asks for and why (the option, or the broker's default and
	// where New read it), "" with ProtocolClassic.
	Joining func(protocol, assignor string)
}

// Member is one member of a consumer group, through franz-go's group
// management. It joins the group, receives its share of the topics'
// partitions, and commits offsets fenced by its generation, so a member that
// was replaced (a zombie) cannot move the group's offsets. The member never
// fetches records itself. The engine reads its partitions through the
// consumer cache.
type Member struct {
	cl       *kgo.Client
	group    string
	topics   []string                        // subscribed by Join
	joining  func(protocol, assignor string) // MemberConfig.Joining
	protocol string                          // ProtocolClassic or ProtocolConsumer
	assignor choice                          // with ProtocolConsumer
	session  atomic.Int64                    // the session timeout, once the client exists
	from     string                          // with ProtocolConsumer: where session was read (SessionTimeoutSource); set by New

	mu       sync.Mutex // guards owned, revoking, ids and leaveCtx
	owned    map[ranges.Key]bool
	revoking map[ranges.Key]bool // owned, and being revoked: Handler.Revoked runs (it still commits them; Owned leaves them out)
	ids      map[string][16]byte // each topic's current ID, as the engine listed it
	leaveCtx context.Context     // the first Close's context; nil until Close

	// clientCtx is the client's context (kgo.WithContext), canceled by
	// cancelClient when Close went around a join in flight
	// (leaveAroundJoin) and once the client is closed.
	clientCtx    context.Context
	cancelClient context.CancelFunc
	held         atomic.Pointer[attempt] // a commit franz-go held for a join and still holds (commit.go), or nil
	attempts     sync.WaitGroup          // commits handed to franz-go (handToClient)
	calls        atomic.Int32            // the handler's callbacks running now

	closeOnce sync.Once
	closed    chan struct{} // closed once the client is closed
}

// New creates the member and its client, which does not join the group yet.
// Join does, and h receives every assignment change from then until Close.
// The client (Client) is the process's one client of the cluster: the
// engine's listings and the consumer cache's cursors use it too, so a member
// holds the connections of one franz-go group consumer (internal/cache/doc.go).
// With kgo.ServerSideBalancer among the group options the member runs the
// consumer group protocol (KIP-848). New first asks every broker
// (ApiVersions, bounded by ctx) whether it serves it and fails with
// ErrNoConsumerProtocol, naming the broker and its version, if one does
// not, where franz-go would fall back to the classic protocol without a
// word. If the coordinator still refuses it at the join (franz-go then
// falls back too), h.Failed says so.
func New(ctx context.Context, cfg MemberConfig, h Handler) (*Member, error) {
	m := &Member{group: cfg.Group, topics: cfg.Topics, joining: cfg.Joining, protocol: ProtocolClassic, owned: map[ranges.Key]bool{}, ids: map[string][16]byte{}, closed: make(chan struct{})}
	opts := append([]kgo.Opt{kgo.SeedBrokers(cfg.Seeds...)}, cfg.ClientOpts...)
	serverSide, assignor, err := checkProtocol(ctx, opts, cfg)
	if err != nil {
		return nil, err
	}
	m.clientCtx, m.cancelClient = context.WithCancel(context.Background())
	opts = append(opts, kgo.WithContext(m.clientCtx))
	if serverSide {
		m.protocol, m.assignor = ProtocolConsumer, assignor
		opts = append(opts, kgo.WithHooks(fallbackHook{group: cfg.Group, h: h}))
	}
	opts = append(opts,
		// No topics yet. franz-go joins once Join adds them
		// (AddConsumeTopics), so the client can be shared before.
		kgo.ConsumerGroup(cfg.Group),
		kgo.DisableAutoCommit(),
		kgo.FetchMaxBytes(1), // nothing is fetched (the topics are paused); keep any stray fetch tiny
		// franz-go fetches the committed offsets of assigned partitions
		// for a consumer of its own. The member has none, so it starts
		// none. Otherwise franz-go lists the start offset of every
		// partition without a commit (and validates the leader epoch of
		// the others) on the connection the engine lists the same
		// partitions on, and a start's listings waited behind it (17 ms
		// at 300 partitions).
		kgo.AdjustFetchOffsetsFn(startNothing),
		kgo.OnPartitionsAssigned(func(ctx context.Context, _ *kgo.Client, a map[string][]int32) {
			m.calls.Add(1)
			defer m.calls.Add(-1)
			keys := toKeys(a)
			m.setOwned(keys, true)
			h.Assigned(ctx, keys)
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, _ *kgo.Client, r map[string][]int32) {
			m.calls.Add(1)
			defer m.calls.Add(-1)
			ctx, cancel := m.revokeCtx(ctx)
			defer cancel()
			keys := toKeys(r)
			m.setRevoking(keys, true) // Owned leaves them out from now on: nothing assigns them again
			h.Revoked(ctx, keys)
			m.setOwned(keys, false)
			m.setRevoking(keys, false)
		}),
		kgo.OnPartitionsLost(func(ctx context.Context, _ *kgo.Client, l map[string][]int32) {
			m.calls.Add(1)
			defer m.calls.Add(-1)
			keys := toKeys(l)
			m.setOwned(keys, false)
			h.Lost(ctx, keys)
		}),
	)
	opts = append(opts,
		kgo.RetryBackoffFn(retryBackoff),
		kgo.RetryTimeoutFn(m.retryTimeout),
		kgo.RequestRetries(math.MaxInt32), // bounded by retryTimeout
		// franz-go takes a new connection closed at once (a broker going
		// down) for a TLS or SASL mistake and does not retry it: one such
		// heartbeat lost every partition. The member is created only after
		// the engine's first listing reached the cluster with the same
		// options, through a client of its own that fails fast, so the
		// configuration is known to work. The listings and cursors that
		// share this client from then on retry such a connection too.
		kgo.AlwaysRetryEOF(),
	)
	opts = append(opts, cfg.GroupOpts...)
	if assignor.opt != nil {
		opts = append(opts, assignor.opt) // in place of BrokerAssignor
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		m.cancelClient()
		return nil, fmt.Errorf("group %q member for %s: %w", cfg.Group, strings.Join(cfg.Seeds, ","), err)
	}
	if d, ok := cl.OptValue(kgo.SessionTimeout).(time.Duration); ok {
		m.session.Store(int64(d))
	}
	if serverSide {
		// The broker's, not the option's (which is never sent).
		d, from := brokerSession(ctx, cl, cfg.Group)
		m.session.Store(int64(d))
		m.from = from
	}
	m.cl = cl
	return m, nil
}

// startNothing is the member's kgo.AdjustFetchOffsetsFn: franz-go consumes
// none of the partitions whose offsets it fetched after an assignment (the
// engine reads them through its own cursors), so it lists nothing for them.
func startNothing(context.Context, map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	return nil, nil
}

// Join subscribes the member to the topics of its config. franz-go joins the
// group (without topics, as a pattern that matched none yet, it joins once
// AddTopics adds some). Call it once, after whatever shares Client is ready
// for the assignments.
func (m *Member) Join() {
	if m.joining != nil {
		m.joining(m.protocol, m.assignor.String())
	}
	m.AddTopics(m.topics...)
}

// Client returns the member's franz-go client. The member's topics are
// paused in it, so its own consumer never fetches. Others may issue
// requests through it (kadm, Broker(id).Request), but not close it:
// Close does.
func (m *Member) Client() *kgo.Client { return m.cl }

// choice is the server-side assignor a consumer-protocol member asks for.
type choice struct {
	name string  // AssignorUniform or AssignorRange
	from string  // why: the option, or where the broker's default was read
	opt  kgo.Opt // the balancer that asks for it in place of BrokerAssignor, nil if named
}

// String is the choice as the member's joining line says it.
func (c choice) String() string {
	if c.name == "" {
		return ""
	}
	return fmt.Sprintf("with the broker's %s assignor (%s)", c.name, c.from)
}

// checkProtocol reports whether the group options ask for the consumer
// group protocol (kgo.ServerSideBalancer) and, if so, that every broker of
// the cluster serves it: a client of the member's connection options (no
// group) asks each for its API versions. It returns the assignor the member
// asks for. With BrokerAssignor it reads the broker's default.
func checkProtocol(ctx context.Context, conn []kgo.Opt, cfg MemberConfig) (bool, choice, error) {
	probe, err := kgo.NewClient(slices.Concat(conn, cfg.GroupOpts)...)
	if err != nil {
		return false, choice{}, fmt.Errorf("group %q member for %s: %w", cfg.Group, strings.Join(cfg.Seeds, ","), err)
	}
	defer probe.Close()
	fromBroker := wantsBrokerAssignor(probe)
	if on, _ := probe.OptValue(kgo.ServerSideBalancer).(bool); !on {
		if fromBroker {
			return false, choice{}, fmt.Errorf("group %q: the broker's default assignor (group.BrokerAssignor) without the consumer group protocol (kgo.ServerSideBalancer)", cfg.Group)
		}
		return false, choice{}, nil
	}
	adm := kadm.NewClient(probe)
	versions, err := adm.ApiVersions(ctx)
	if err != nil {
		return true, choice{}, fmt.Errorf("group %q: asking the brokers whether they serve the consumer group protocol: %w", cfg.Group, err)
	}
	for _, v := range versions.Sorted() {
		if v.Err != nil {
			return true, choice{}, fmt.Errorf("group %q: asking broker %d whether it serves the consumer group protocol: %w", cfg.Group, v.NodeID, v.Err)
		}
		if max, ok := v.KeyMaxVersion(kmsg.ConsumerGroupHeartbeat.Int16()); !ok || max < 1 {
			return true, choice{}, fmt.Errorf("group_protocol %s for group %q: broker %d (%s) does not serve it: %w", ProtocolConsumer, cfg.Group, v.NodeID, v.VersionGuess(), ErrNoConsumerProtocol)
		}
	}
	if !fromBroker {
		c := choice{name: AssignorUniform, from: "group_remote_assignor"}
		if bs, _ := probe.OptValue(kgo.Balancers).([]kgo.GroupBalancer); len(bs) > 0 && bs[0].ProtocolName() == AssignorRange {
			c.name = AssignorRange
		}
		return true, c, nil
	}
	name, from, err := brokerDefaultAssignor(ctx, adm, cfg.Group)
	if err != nil {
		return true, choice{}, err
	}
	return true, choice{name: name, from: from, opt: Assignor(name)}, nil
}

// fallbackHook sees the member's requests. A JoinGroup request means
// franz-go fell back to the classic protocol, because the coordinator
// answered the consumer protocol's heartbeat with UNSUPPORTED_VERSION.
type fallbackHook struct {
	group string
	h     Handler
}

// OnBrokerWrite implements kgo.HookBrokerWrite.
func (f fallbackHook) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == kmsg.JoinGroup.Int16() && err == nil {
		f.h.Failed(fmt.Errorf("group_protocol %s for group %q: the coordinator (broker %d, %s:%d) refused it and the client fell back to the classic protocol: %w",
			ProtocolConsumer, f.group, meta.NodeID, meta.Host, meta.Port, ErrNoConsumerProtocol))
	}
}

// Protocol returns the group protocol the member runs: ProtocolClassic or
// ProtocolConsumer.
func (m *Member) Protocol() string { return m.protocol }

// How the member retries its requests (commits, heartbeats, joins) when the
// coordinator does not answer or answers with a retriable error. franz-go's
// classic group management loses every partition (OnPartitionsLost) as soon
// as one heartbeat request fails for good, even with a retriable error (the
// coordinator's broker is dead but still named by FindCoordinator, the new
// coordinator says NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS). With
// franz-go's defaults (backoff doubling from 250ms to 5s, no retry that would
// end past the session timeout counted from the heartbeat's first try) that
// happens several seconds before the coordinator would end the session. So,
// as Kafka's Java consumer does (retry.backoff.ms 100ms doubling to
// retry.backoff.max.ms 1s), the member retries every second at most, a
// heartbeat until the session would be over. It keeps its partitions while
// it rediscovers the coordinator and loses them only when the coordinator
// says the session ended (UNKNOWN_MEMBER_ID) or the session is over for
// sure. A new connection that the broker closes at once is retried too
// (kgo.AlwaysRetryEOF).
const (
	retryBackoffMin = 100 * time.Millisecond
	retryBackoffMax = time.Second
)

// retryBackoff is the member's kgo.RetryBackoffFn: retryBackoffMin doubling
// to retryBackoffMax, with 20% jitter so members do not retry in step.
func retryBackoff(fails int) time.Duration {
	d := retryBackoffMax
	if fails < 10 {
		d = min(retryBackoffMax, retryBackoffMin<<max(fails-1, 0))
	}
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// retryTimeout is the member's kgo.RetryTimeoutFn. It says how long one
// request is retried. A heartbeat is retried for the session timeout plus
// one backoff. Joins and syncs are retried for the session timeout
// (franz-go's default). Other requests are retried for 30s.
func (m *Member) retryTimeout(key int16) time.Duration {
	session := time.Duration(m.session.Load())
	if session == 0 {
		session = 45 * time.Second // franz-go's default, until the client exists
	}
	switch key {
	case kmsg.Heartbeat.Int16():
		return session + retryBackoffMax
	case kmsg.JoinGroup.Int16(), kmsg.SyncGroup.Int16():
		return session
	}
	return 30 * time.Second
}

func (m *Member) setOwned(keys []ranges.Key, owned bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		if owned {
			m.owned[k] = true
		} else {
			delete(m.owned, k)
		}
	}
}

// setRevoking marks keys as being revoked (or no longer).
func (m *Member) setRevoking(keys []ranges.Key, on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.revoking == nil {
		m.revoking = map[ranges.Key]bool{}
	}
	for _, k := range keys {
		if on {
			m.revoking[k] = true
		} else {
			delete(m.revoking, k)
		}
	}
}

// Owned returns the partitions of topic the group assigned to the member
// and did not take back, in partition order. A partition whose revocation
// has begun (Handler.Revoked runs) is not owned any more here, though the
// member still commits it until Revoked returns.
func (m *Member) Owned(topic string) []ranges.Key {
	m.mu.Lock()
	defer m.mu.Unlock()
	var keys []ranges.Key
	for k := range m.owned {
		if k.Topic == topic && !m.revoking[k] {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, ranges.Key.Compare)
	return keys
}

// Group returns the group's name.
func (m *Member) Group() string { return m.group }

// SessionTimeout is the member's session timeout, after which the
// coordinator ends a session it hears nothing of: with the classic protocol
// the group option (kgo.SessionTimeout, franz-go's default 45 s). With the
// consumer protocol (KIP-848) the broker's, as New read it (the group's
// consumer.session.timeout.ms, else the coordinator's
// group.consumer.session.timeout.ms, else Kafka's default, 45 s).
// SessionTimeoutSource says which.
func (m *Member) SessionTimeout() time.Duration { return time.Duration(m.session.Load()) }

// SessionTimeoutSource says where the broker's SessionTimeout was read
// (the consumer protocol), for log lines; "" with the classic protocol.
func (m *Member) SessionTimeoutSource() string { return m.from }

// Founding reports whether the group has neither committed offsets nor
// members: called before Join, it says that this member is one of the
// group's founders, the members that start it (together, within Kafka's
// group.initial.rebalance.delay.ms), so a partition that exists now existed
// when the group started. A group that does not exist yet founds too.
func (m *Member) Founding(ctx context.Context) (bool, error) {
	adm := kadm.NewClient(m.cl)
	offs, err := adm.FetchOffsets(ctx, m.group)
	switch {
	case errors.Is(err, kerr.GroupIDNotFound):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("fetch committed offsets of group %q: %w", m.group, err)
	}
	has := false
	offs.Each(func(r kadm.OffsetResponse) { has = has || (r.Err == nil && r.At >= 0) })
	if has {
		return false, nil
	}
	members := 0
	if m.protocol == ProtocolConsumer {
		d, err := adm.DescribeConsumerGroups(ctx, m.group)
		if err != nil {
			return false, fmt.Errorf("describe group %q: %w", m.group, err)
		}
		if g, ok := d[m.group]; ok {
			if g.Err != nil && !errors.Is(g.Err, kerr.GroupIDNotFound) {
				return false, fmt.Errorf("describe group %q: %w", m.group, g.Err)
			}
			members = len(g.Members)
		}
	} else {
		d, err := adm.DescribeGroups(ctx, m.group)
		if err != nil {
			return false, fmt.Errorf("describe group %q: %w", m.group, err)
		}
		if g, ok := d[m.group]; ok {
			if g.Err != nil && !errors.Is(g.Err, kerr.GroupIDNotFound) {
				return false, fmt.Errorf("describe group %q: %w", m.group, g.Err)
			}
			members = len(g.Members)
		}
	}
	return members == 0, nil
}

// Confirm asks the group's coordinator whether this member is still in the
// group: true when the group (DescribeGroups; ConsumerGroupDescribe with the
// consumer protocol) lists the member's ID. A member whose session the
// coordinator ended is not listed, and learns it from its next heartbeat
// (Handler.Lost). One that has not joined yet has no ID and is not
// confirmed.
func (m *Member) Confirm(ctx context.Context) (bool, error) {
	id, _ := m.cl.GroupMetadata()
	if id == "" {
		return false, nil
	}
	adm := kadm.NewClient(m.cl)
	if m.protocol == ProtocolConsumer {
		d, err := adm.DescribeConsumerGroups(ctx, m.group)
		if err == nil {
			err = d.Error()
		}
		if err != nil {
			return false, fmt.Errorf("describe group %q: %w", m.group, err)
		}
		for _, mb := range d[m.group].Members {
			if mb.MemberID == id {
				return true, nil
			}
		}
		return false, nil
	}
	d, err := adm.DescribeGroups(ctx, m.group)
	if err == nil {
		err = d.Error()
	}
	if err != nil {
		return false, fmt.Errorf("describe group %q: %w", m.group, err)
	}
	for _, mb := range d[m.group].Members {
		if mb.MemberID == id {
			return true, nil
		}
	}
	return false, nil
}

// Close leaves the group (revoking every partition first, through the
// handler) and closes the member's client. The revocation's context and the
// LeaveGroup request end with ctx (franz-go's own context would let them
// retry for minutes against a coordinator that does not answer). A classic
// member whose join or sync is in flight leaves at once by itself
// (leaveAroundJoin), where franz-go would wait until the coordinator answers
// the join. If ctx ends first, Close returns its error and the client
// finishes closing in the background, promptly since what it waits for has
// ended too. Calling Close again waits for it again.
func (m *Member) Close(ctx context.Context) error {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		m.leaveCtx = ctx
		m.mu.Unlock()
		go func() { // owned by the member; stopped signal: m.closed
			defer close(m.closed)
			left := make(chan struct{})
			go func() { // owned by this goroutine; stopped signal: left
				defer close(left)
				_ = m.cl.LeaveGroupContext(ctx) // an error only says the leave was cut short; the session then expires
			}()
			if m.protocol == ProtocolClassic {
				m.leaveAroundJoin(ctx, left)
			}
			<-left
			m.cl.Close()
			m.cancelClient() // commits franz-go still held end (handToClient)
			m.attempts.Wait()
		}()
	})
	select {
	case <-m.closed:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("leave group %q: %w", m.group, ctx.Err())
	}
}

// leaveGrace is how long Close lets franz-go leave the group before it
// takes the leave for one waiting for a join or sync in flight (when none
// of the handler's callbacks runs: a revocation's drain and commit may take
// longer). A leave is one request once the handler revoked the partitions.
const leaveGrace = 500 * time.Millisecond

// leaveAroundJoin leaves the group without franz-go if franz-go's leave
// (left) waits for a join or sync in flight. franz-go leaves only once the
// coordinator answered them, and a coordinator holds a JoinGroup until
// every member rejoined or its session ended (45 s by default after a
// member died), past Benthos' shutdown_timeout (20 s by default), which then
// kills the process before it leaves, and the group waits another session
// for this member too. So Close does not wait: once a commit went around a
// join (Member.held) at once, else after leaveGrace with no callback of the
// handler running, the member sends LeaveGroup itself (a static member,
// with an instance ID, does not leave, as franz-go's own Close does not),
// and cancels its client's context, so the join in flight returns at once
// and franz-go's leave ends with it. The coordinator answers the held
// JoinGroup of a member that left with UNKNOWN_MEMBER_ID.
func (m *Member) leaveAroundJoin(ctx context.Context, left <-chan struct{}) {
	if m.held.Load() == nil {
		t := time.NewTimer(leaveGrace)
		defer t.Stop()
		for waiting := true; waiting; {
			select {
			case <-left:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if waiting = m.calls.Load() > 0; waiting {
				t.Reset(leaveGrace) // a revocation runs: franz-go leaves once it returns
			}
		}
	}
	if id, _ := m.cl.GroupMetadata(); id != "" {
		if _, static := m.instanceID(); !static {
			req := kmsg.NewPtrLeaveGroupRequest()
			req.Group = m.group
			lm := kmsg.NewLeaveGroupRequestMember()
			lm.MemberID = id
			lm.Reason = kmsg.StringPtr("client leaving group while its join is in flight")
			req.Members = append(req.Members, lm)
			_, _ = req.RequestWith(ctx, m.cl) // as franz-go's leave: if it fails, the session expires
		}
	}
	m.cancelClient()
}

// instanceID returns the member's static group instance ID
// (kgo.InstanceID), if it has one.
func (m *Member) instanceID() (string, bool) {
	v := m.cl.OptValues(kgo.InstanceID)
	if len(v) != 2 {
		return "", false
	}
	id, _ := v[0].(string)
	static, _ := v[1].(bool)
	return id, static
}

// revokeCtx returns the context for a revocation callback: franz-go's, and
// once Close was called, ending with Close's context too.
func (m *Member) revokeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	m.mu.Lock()
	leaveCtx := m.leaveCtx
	m.mu.Unlock()
	if leaveCtx == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(leaveCtx, cancel)
	return ctx, func() { stop(); cancel() }
}

func toKeys(m map[string][]int32) []ranges.Key {
	var keys []ranges.Key
	for t, ps := range m {
		for _, p := range ps {
			keys = append(keys, ranges.Key{Topic: t, Partition: p})
		}
	}
	slices.SortFunc(keys, ranges.Key.Compare)
	return keys
}

// AddTopics adds topics to the member's subscription (topic patterns
// matched new topics): franz-go rejoins the group with the larger
// subscription, and the group's leader balances their partitions in. Like
// the others, the topics are never fetched by the member.
func (m *Member) AddTopics(topics ...string) {
	if len(topics) == 0 {
		return
	}
	m.cl.PauseFetchTopics(topics...)
	m.cl.AddConsumeTopics(topics...)
}
