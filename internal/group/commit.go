package group

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// How a commit gets past a rebalance's join. franz-go holds every commit of
// a classic member while the member joins and syncs (kgo's
// noCommitDuringJoinAndSync: it avoids a commit refused with
// REBALANCE_IN_PROGRESS between the JoinGroup's and the SyncGroup's answers,
// or with ILLEGAL_GENERATION when sent with the generation the sync just
// ended). A coordinator answers the JoinGroups only once every member of the
// group rejoined or was dropped, so one member that died (SIGKILL, SIGSTOP)
// held the commits of every other member until its session ended (45 s by
// default), and the engine's ranges kept their max_in_flight slots until a
// commit covered them: every member stopped reading. While the coordinator
// waits for the JoinGroups, though, the group is preparing the rebalance,
// its generation has not moved, every member still owns its partitions, and
// the coordinator accepts the commits of that generation (Kafka's classic
// group coordinator, and franz-go's kfake, check the member and the
// generation and refuse only while the rebalance completes). So a commit
// that franz-go has not sent within joinHoldGrace goes around it: the member
// sends the OffsetCommit itself, with the member ID and generation franz-go
// holds (GroupMetadata), fenced as franz-go's own. Answered
// REBALANCE_IN_PROGRESS or ILLEGAL_GENERATION (the join was answered
// meanwhile), it is handed to franz-go once more, which sends it once the
// sync is answered (commitOnce). franz-go's attempt is refused when it
// would send it (its pre-commit function), so exactly one of the two goes to
// the coordinator. It stays waiting for franz-go's commit lock, and while it
// waits (Member.held) the member's next commits go around at once, with no
// grace. Under the consumer protocol (KIP-848) nothing holds commits, and a
// commit always goes through franz-go.
const joinHoldGrace = 100 * time.Millisecond

var (
	// errAround refuses franz-go's attempt at a commit the member sent itself.
	errAround = errors.New("sent by the member around the join in flight")
	// errNoGeneration refuses to send a commit around a join without the
	// member ID and generation that fence it.
	errNoGeneration = errors.New("the member has no generation to commit with while it joins (its session ended)")
)

// PreCommitContext returns ctx with fn attached. Member.Commit calls fn with
// the OffsetCommit request just before it is sent, through franz-go or
// around it, so fn can set what the caller adds to it (the offsets'
// metadata). If fn returns an error, nothing is sent and Commit returns it.
// (kgo.PreCommitFnContext reaches franz-go's commits only, and Commit sets
// its own.)
func PreCommitContext(ctx context.Context, fn func(*kmsg.OffsetCommitRequest) error) context.Context {
	return context.WithValue(ctx, preCommitKey{}, fn)
}

type preCommitKey struct{}

// attempt is a commit handed to franz-go (CommitOffsetsSync).
type attempt struct {
	state atomic.Int32               // attemptWaiting, then attemptSent or attemptAround
	done  chan struct{}              // closed once franz-go called back; then resp and err are set
	resp  *kmsg.OffsetCommitResponse // franz-go's answer
	err   error
}

const (
	attemptWaiting int32 = iota // franz-go has not called the pre-commit function yet: it holds the commit
	attemptSent                 // franz-go sends it
	attemptAround               // the member sent it itself; franz-go's is refused
)

// Commit commits offsets (each the next offset to read of its partition)
// with the member's current generation. Offsets of partitions the member no
// longer owns are not sent and come back in errs. A commit the coordinator
// fences (the member was replaced or the generation moved on) fails in err.
// A classic member's commit does not wait for a join in flight (above). With
// PreCommitContext, ctx sets what the request carries besides the offsets.
func (m *Member) Commit(ctx context.Context, offsets map[ranges.Key]int64) (errs map[ranges.Key]error, err error) {
	if len(offsets) == 0 {
		return nil, nil
	}
	send := map[string]map[int32]kgo.EpochOffset{}
	m.mu.Lock()
	for k, at := range offsets {
		if !m.owned[k] {
			if errs == nil {
				errs = map[ranges.Key]error{}
			}
			errs[k] = fmt.Errorf("commit %s to group %q: partition no longer owned by this member", k, m.group)
			continue
		}
		if send[k.Topic] == nil {
			send[k.Topic] = map[int32]kgo.EpochOffset{}
		}
		send[k.Topic][k.Partition] = kgo.EpochOffset{Epoch: -1, Offset: at}
	}
	m.mu.Unlock()
	if len(send) == 0 {
		return errs, nil
	}
	pre, _ := ctx.Value(preCommitKey{}).(func(*kmsg.OffsetCommitRequest) error)
	resp, around, reqErr := m.commitOnce(ctx, send, pre, true)
	if reqErr == nil && around && joinAnswered(resp) {
		// The coordinator answered the join meanwhile: franz-go sends
		// the commit once the sync is answered.
		resp, around, reqErr = m.commitOnce(ctx, send, pre, false)
	}
	if reqErr != nil {
		return errs, fmt.Errorf("commit to group %q: %w", m.group, reqErr)
	}
	if !around {
		resp = m.recommitRecreated(ctx, send, resp)
	}
	if resp != nil {
		for _, t := range resp.Topics {
			topic := m.answeredTopic(t.Topic, t.TopicID, send)
			for _, p := range t.Partitions {
				if cerr := kerr.ErrorForCode(p.ErrorCode); cerr != nil {
					if errs == nil {
						errs = map[ranges.Key]error{}
					}
					k := ranges.Key{Topic: topic, Partition: p.Partition}
					errs[k] = fmt.Errorf("commit %s to group %q: %w", k, m.group, cerr)
				}
			}
		}
	}
	return errs, nil
}

// answeredTopic names the topic of an OffsetCommit answer. From v10 on a
// broker may answer by topic ID alone, so an empty name is looked up by ID
// among the topics listed, or is the one topic sent.
func (m *Member) answeredTopic(name string, id [16]byte, sent map[string]map[int32]kgo.EpochOffset) string {
	if name != "" {
		return name
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for n, known := range m.ids {
		if known == id && id != ([16]byte{}) {
			return n
		}
	}
	if len(sent) == 1 {
		for n := range sent {
			return n
		}
	}
	return name
}

// SetTopicID records the current ID of topic, as listed by the engine.
func (m *Member) SetTopicID(topic string, id [16]byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ids[topic] = id
}

// recommitRecreated sends again, as a request of its own, the commits that
// franz-go refused with UNKNOWN_TOPIC_ID because its group client still
// holds a topic's old ID. A topic deleted and created again under its name
// keeps the old ID in the member's cursors until records of the new topic
// are fetched, which this member (it fetches nothing) never does. The
// request carries the new ID and the member's ID and generation, so the
// coordinator fences it like any other commit. It returns resp with those
// partitions' answers replaced.
func (m *Member) recommitRecreated(ctx context.Context, sent map[string]map[int32]kgo.EpochOffset, resp *kmsg.OffsetCommitResponse) *kmsg.OffsetCommitResponse {
	if resp == nil {
		return nil
	}
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group = m.group
	req.MemberID, req.Generation = m.cl.GroupMetadata()
	m.mu.Lock()
	for _, t := range resp.Topics {
		id, ok := m.ids[t.Topic]
		if !ok || id == ([16]byte{}) {
			continue
		}
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic, rt.TopicID = t.Topic, id
		for _, p := range t.Partitions {
			if p.ErrorCode != kerr.UnknownTopicID.Code {
				continue
			}
			eo, ok := sent[t.Topic][p.Partition]
			if !ok {
				continue
			}
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = p.Partition, eo.Offset, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		if len(rt.Partitions) > 0 {
			req.Topics = append(req.Topics, rt)
		}
	}
	m.mu.Unlock()
	if len(req.Topics) == 0 {
		return resp
	}
	again, err := req.RequestWith(ctx, m.cl)
	answers := map[ranges.Key]int16{}
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			answers[ranges.Key{Topic: rt.Topic, Partition: rp.Partition}] = kerr.UnknownTopicID.Code
		}
	}
	if err == nil {
		for _, t := range again.Topics {
			topic := t.Topic
			for _, rt := range req.Topics {
				if rt.TopicID == t.TopicID {
					topic = rt.Topic
				}
			}
			for _, p := range t.Partitions {
				answers[ranges.Key{Topic: topic, Partition: p.Partition}] = p.ErrorCode
			}
		}
	}
	for i := range resp.Topics {
		t := &resp.Topics[i]
		for j := range t.Partitions {
			if code, ok := answers[ranges.Key{Topic: t.Topic, Partition: t.Partitions[j].Partition}]; ok {
				t.Partitions[j].ErrorCode = code
			}
		}
	}
	return resp
}

// commitOnce sends one commit: through franz-go, or around it if franz-go
// holds it for a join (joinHoldGrace; at once when useHeld is set and a
// commit franz-go held is still waiting). around reports that the member
// sent it itself.
func (m *Member) commitOnce(ctx context.Context, send map[string]map[int32]kgo.EpochOffset, pre func(*kmsg.OffsetCommitRequest) error, useHeld bool) (resp *kmsg.OffsetCommitResponse, around bool, err error) {
	canGoAround := m.protocol == ProtocolClassic && m.idsKnown(send)
	if canGoAround && useHeld && m.held.Load() != nil {
		resp, err = m.commitAround(ctx, send, pre)
		return resp, true, err
	}
	a := m.handToClient(ctx, send, pre)
	if canGoAround {
		t := time.NewTimer(joinHoldGrace)
		defer t.Stop()
		select {
		case <-a.done:
		case <-t.C:
			m.held.Store(a)
			if a.state.CompareAndSwap(attemptWaiting, attemptAround) {
				select {
				case <-a.done: // franz-go gave it up already (its context ended)
					m.held.CompareAndSwap(a, nil)
				default:
				}
				resp, err = m.commitAround(ctx, send, pre)
				return resp, true, err
			}
			m.held.CompareAndSwap(a, nil) // franz-go sends it
		}
	}
	<-a.done
	return a.resp, false, a.err
}

// handToClient hands a commit to franz-go (CommitOffsetsSync) and returns
// at once. The attempt ends with ctx while franz-go holds it or sends it.
// Once the member sent the commit itself (attemptAround), it waits on,
// until franz-go takes it (and refuses it) or the client closes, so that
// Member.held says whether franz-go still holds commits.
func (m *Member) handToClient(ctx context.Context, send map[string]map[int32]kgo.EpochOffset, pre func(*kmsg.OffsetCommitRequest) error) *attempt {
	a := &attempt{done: make(chan struct{})}
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopCaller := context.AfterFunc(ctx, func() {
		if a.state.Load() != attemptAround {
			cancel()
		}
	})
	stopClient := context.AfterFunc(m.clientCtx, cancel)
	actx = kgo.PreCommitFnContext(actx, func(req *kmsg.OffsetCommitRequest) error {
		if !a.state.CompareAndSwap(attemptWaiting, attemptSent) {
			return errAround
		}
		if pre != nil {
			return pre(req)
		}
		return nil
	})
	m.attempts.Add(1)
	go func() { // owned by the member (attempts); stopped signal: a.done
		defer m.attempts.Done()
		defer cancel()
		defer stopCaller()
		defer stopClient()
		m.cl.CommitOffsetsSync(actx, send, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, r *kmsg.OffsetCommitResponse, err error) {
			a.resp, a.err = r, err
		})
		close(a.done)
		m.held.CompareAndSwap(a, nil) // franz-go lets commits through again (or the client closed)
	}()
	return a
}

// commitAround sends a commit as franz-go would, with the member ID and
// generation franz-go holds and the topics' IDs the engine listed, without
// waiting for franz-go's join and sync.
func (m *Member) commitAround(ctx context.Context, send map[string]map[int32]kgo.EpochOffset, pre func(*kmsg.OffsetCommitRequest) error) (*kmsg.OffsetCommitResponse, error) {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group = m.group
	req.MemberID, req.Generation = m.cl.GroupMetadata()
	if req.MemberID == "" || req.Generation < 0 {
		// The member lost its ID or generation (its session ended). A
		// coordinator of an empty group would take a commit without
		// them from anyone.
		return nil, errNoGeneration
	}
	if id, ok := m.instanceID(); ok {
		req.InstanceID = &id
	}
	m.mu.Lock()
	for topic, ps := range send {
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic, rt.TopicID = topic, m.ids[topic]
		for p, eo := range ps {
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = p, eo.Offset, eo.Epoch
			rp.Metadata = &req.MemberID // as franz-go's
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	m.mu.Unlock()
	if pre != nil {
		if err := pre(req); err != nil {
			return nil, err
		}
	}
	return req.RequestWith(ctx, m.cl)
}

// idsKnown reports whether the engine listed the ID of every topic of send.
// A commit without a topic's ID needs OffsetCommit v9 at most, which only
// franz-go's own commits pin.
func (m *Member) idsKnown(send map[string]map[int32]kgo.EpochOffset) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for topic := range send {
		if m.ids[topic] == ([16]byte{}) {
			return false
		}
	}
	return true
}

// joinAnswered reports a commit sent around franz-go that the coordinator
// refused because it answered the join meanwhile: REBALANCE_IN_PROGRESS (the
// sync is pending) or ILLEGAL_GENERATION (the generation moved on).
func joinAnswered(resp *kmsg.OffsetCommitResponse) bool {
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode == kerr.RebalanceInProgress.Code || p.ErrorCode == kerr.IllegalGeneration.Code {
				return true
			}
		}
	}
	return false
}
