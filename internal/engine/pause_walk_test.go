package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kbr/kafka_batched_ranges/internal/group"
)

// TestPromisePausedMemberHandsOutNothingNewUntilTheCoordinatorListsIt walks
// random sequences of what a group member's pause guard meets, checking at
// every step docs/several-instances.md's "It then hands out no new batch, of
// any partition, until the coordinator lists it as a member (...), asked
// after the pause, or its heartbeat learns that the session is over", "One
// pause is one hold", "a second pause while it asks makes the answer stale,
// and it asks again" and "While the coordinator cannot answer, the hold
// stays": the reporter's beats (late ticks of a SIGSTOP too), Next's and a
// reader's look at the clock, pauses seen by either, confirmations asked
// and answered later (listed, refused, failed, or answered after another
// pause), and sessions lost. A model of the documented rule says after each
// event whether new batches are held; the guard's holding (what Next and a
// received batch consult) must agree.
func TestPromisePausedMemberHandsOutNothingNewUntilTheCoordinatorListsIt(t *testing.T) {
	m := &group.Member{} // the classic protocol's session timeout unread: a pause is a gap over 2 s
	limit := pauseLimit(m)
	require.Equal(t, 2*time.Second, limit)
	for seed := range uint64(400) {
		rng := rand.New(rand.NewPCG(seed, 52))
		log := &testLogger{}
		g := &pauseGuard{group: "g", log: limitedLog{Logger: log, lines: newLineLimit()}}
		now := time.Unix(1_000_000, 0)
		g.tick(now, m) // the reporter's first beat

		// The model.
		alive := now
		held := false
		gaps := 0 // pauses seen
		lostSinceGap := false
		type question struct {
			gaps int  // pauses seen when it was asked
			lost bool // a session lost since the last pause, as it was asked
		}
		var asked *question
		holds := 0
		// see is the model's sawRunning: a time after the last seen running
		// by more than the limit is a pause.
		see := func(at time.Time) {
			if at.Before(alive) {
				return
			}
			gap := at.Sub(alive)
			alive = at
			if gap > limit {
				gaps++
				lostSinceGap = false
				if !held {
					held = true
					holds++
				}
			}
		}
		// step is how far the clock moves: a beat, or a pause.
		step := func() time.Duration {
			if rng.IntN(4) == 0 {
				return limit + time.Duration(rng.IntN(int(20*time.Second)))
			}
			return time.Duration(rng.IntN(int(limit))) + time.Millisecond
		}
		var trace []string
		for i := range 60 {
			ev := rng.IntN(8)
			var what string
			switch ev {
			case 0, 1: // the reporter's beat, with time.Now()
				now = now.Add(step())
				g.tick(now, m)
				see(now)
				what = "beat"
			case 2: // the tick that fell due during a stop, with its old time
				late := now.Add(-time.Duration(rng.IntN(int(30 * time.Second))))
				g.tick(late, m)
				see(late)
				what = "late tick"
			case 3: // Next (or a batch received from a reader) looks at the clock
				now = now.Add(step())
				got := g.holding(now, m)
				see(now)
				require.Equal(t, held, got, "seed %d event %d (Next after %v): holding %v, the model %v\n%v", seed, i, now.Sub(alive), got, held, trace)
				what = "next"
			case 4: // the hold asks the coordinator (confirmMember)
				if held {
					q := &question{gaps: int(g.gaps), lost: g.losses != g.lostAt}
					require.Equal(t, lostSinceGap, q.lost, "seed %d event %d: a session lost since the last pause, as the hold sees it\n%v", seed, i, trace)
					require.Equal(t, gaps, q.gaps, "seed %d event %d: pauses seen\n%v", seed, i, trace)
					asked = q
					what = "ask"
				}
			case 5: // the answer: listed (or the session lost since, or the engine stops)
				if asked == nil {
					break
				}
				now = now.Add(step()) // the process may stop while waiting for it
				ended := g.endHold(uint64(asked.gaps), "the group lists this member", now, m)
				see(now)
				want := gaps == asked.gaps
				require.Equal(t, want, ended, "seed %d event %d: a confirmation asked after pause %d, answered after pause %d, ended the hold: %v\n%v", seed, i, asked.gaps, gaps, ended, trace)
				if ended {
					held = false
				}
				asked = nil
				what = fmt.Sprintf("listed (ended %v)", ended)
			case 6: // the answer: not listed, refused or failed; the hold stays and asks again
				asked = nil
				what = "refused"
			case 7: // the member's heartbeat learns that its session is over (Handler.Lost)
				g.sessionLost()
				lostSinceGap = true
				what = "lost"
			}
			if what == "" {
				continue
			}
			trace = append(trace, what)
			require.Equal(t, held, !g.since.IsZero(), "seed %d event %d (%s): held %v, the model %v\n%v", seed, i, what, !g.since.IsZero(), held, trace)
			require.Equal(t, held, g.holding(alive, m), "seed %d event %d (%s): Next would hand out new batches: %v\n%v", seed, i, what, held, trace)
		}
		require.Equal(t, holds, countLines(log, "WARN", holdLine), "seed %d: one pause, one hold (one warning each)\n%v", seed, trace)
	}
}
