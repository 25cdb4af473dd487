// Package cache holds the partition-pinned cursor cache.
//
// A cursor is one read position of one partition. It holds where the next
// record comes from, the record batches fetched past it, and the
// partition's leader and leader epoch as the cursor last saw them. It is not a client.
// A caller leases a cursor for a partition with (*Cache).Acquire, reads one
// half-open offset range [start, end) with (*Lease).Read, and hands the
// cursor back with (*Lease).Release. A lease is exclusive. While it is held
// no other caller can touch that cursor. Two concurrent leases of one
// partition get two different cursors.
//
// The point of caching is continuation. A cursor remembers its read
// position and keeps what it fetched past the end of the last range. When
// the next range of that partition starts exactly at that position, Read
// continues with those records, with no seek and no refetch. A range that starts
// anywhere else seeks (drops what was fetched and fetches from the new
// offset).
//
// A range is complete when the read position reaches its end, not when
// end-start records have arrived. Offsets taken by transaction markers,
// aborted records (under read_committed) or compaction never arrive as
// records, so counting records would hang. The position comes from the
// record batches themselves (kgo.ProcessFetchPartition), which always advance
// past such offsets.
//
// Offsets are never reset silently. A fetch answered with
// OFFSET_OUT_OF_RANGE returns an *OffsetOutOfRangeError naming the topic,
// partition and the offsets that no longer exist.
//
// # One fetch loop per broker
//
// Every cursor reads through one franz-go client (the engine passes the
// client that lists watermarks), which keeps at most two connections per
// broker, plus its seed connection. One is for fetches. The other is for
// everything else (metadata, leader epochs, offsets, listings). Listings
// (ListOffsets, Metadata) go on the other connection than fetches, so a
// long poll the broker holds never delays them, nor a cursor's metadata
// request. TestListingsDoNotWaitBehindALongPoll sees them answered in
// about 1 ms while a fetch is held. So connections, and TLS handshakes and SASL
// logins, grow with brokers, never with partitions, ranges or records,
// whatever Capacity is. The one exception, a distant broker's backlog
// lanes, is below.
//
// A group member's client is that client too. The member (internal/group)
// creates it, and the engine's listings and the cursors move to it once it
// exists. So a member holds the connections of one franz-go group consumer.
// The first is the seed connection. franz-go sends one any-broker request,
// such as the metadata every listing refreshes, to a seed per round over the
// discovered brokers, for good (kgo's Client.broker), so it never idles out.
// Then there is a fetch and a normal connection per broker. Heartbeats and
// commits go on the normal one, with the listings, and the broker answers
// them at once. Last there is the coordinator's group connection (JoinGroup
// and SyncGroup, which the broker holds during a rebalance). On one broker
// (resources/bench -mode connections) we measured 4, as a plain franz-go
// group consumer, where two clients held 6. TestConnectionsPerBroker
// asserts 2 per broker plus 2. The member's retry settings are client-wide.
// Its client retries up to the session timeout. With AlwaysRetryEOF a new
// connection the broker closes at once is retried, where franz-go otherwise
// takes it for a TLS or SASL mistake. So the engine's first listing goes
// through a client of its own that fails fast on such a mistake. The
// member's client is created only once that listing reached the cluster
// with the same options. From then on the listings and the cursors'
// metadata requests retry such a connection too. Each is bounded, the
// cache's metadata requests by metaTimeout.
//
// A broker's fetch connection serves one request at a time (Kafka reads the
// next request of a connection only once it answered the last), so each
// broker gets one fetch loop. It is a goroutine that, round after round,
// puts every cursor of that broker needing data into one FetchRequest
// ((*kgo.Client).Broker(id).Request) and hands each cursor its part of the
// response. At most one cursor of a partition goes into a round. Two ranges
// of one partition read at once take turns. A leased cursor goes before a
// follower, then the one that waited longest. The loop does not decode. It
// queues each partition's record batches on the cursor (at most two
// answers) and reads from the batch headers where the next fetch starts, so
// the next fetch is under way while the lease holder decodes the last one,
// in its own goroutine, and decoding runs on every core. A loop left with no
// cursor stops (so a broker gone from the metadata keeps no goroutine). The
// next cursor of that broker starts a new one.
//
// A round with nothing to read is a long poll. The broker holds it until
// records arrive or FetchMaxWait passes, and answers as soon as FetchMinBytes
// are there. It polls briefly (5 ms) instead while a lease holder of the same
// broker that may want data is not in it, since the connection answers one
// request at a time. Holders of other brokers, or learning their leader, do
// not shorten it. Caught-up cursors go into one long poll together, never
// split over two rounds. The broker reads a connection's next request only
// once it answered the last, so a partition outside the poll in flight is
// not asked for until that poll ends, and two long polls in flight would
// make each half wait for the other's records (a start's first records came
// 50 to 350 ms late so). While a long poll may be held the loop sends
// nothing more, and it polls briefly just after a cursor joined and while
// cursors learn their leader for the first time, so the partitions of a
// start or an assignment are all in its first long poll
// (TestStartedPartitionsShareTheFirstLongPoll). The engine starts them under
// Hold, which keeps every loop from sending a round until it is released,
// and a new cursor whose topic's metadata is answered already takes its
// leader at once, so each broker's first round of a start asks for all of
// them (TestPartitionsStartedUnderHoldShareTheFirstRound). A new follower
// (Watch of a partition without a cursor there) that joins while its broker's long poll
// for the others is held, as when partitions are assigned to a running
// member, abandons that poll. franz-go closes the fetch connection (it
// carries nothing else then) and the next round, on a new connection,
// takes every follower (TestPartitionStartedWhileALongPollIsHeldIsFollowedAtOnce).
// That costs a connection (a TLS handshake, a SASL login), so a loop does
// it at most once per FetchMaxWait. Other cursors that start following (a
// range's reaching the tail, one back from a leadership change) wait for the
// poll, at most FetchMaxWait, for their first fetch as followers.
// Kafka's fetch sessions (KIP-227) are not used. They save request bytes
// when the same partitions are fetched round after round. But rounds here
// change as cursors come and go, and the full request is small. It is about
// 30 bytes per partition, so 30 KB per round at 1,000 partitions, with two
// rounds a second when idle (see docs/benchmarks.md).
//
// # Backlog lanes
//
// A broker's loop has at most maxRounds (2) rounds in flight on its one
// fetch connection, and a round asks for one cursor of a partition, so the
// ranges of one partition read at once got at most 2 ×
// FetchMaxPartitionBytes per round trip, whatever max_in_flight. That is
// 42 MB/s at 50 ms with the defaults. Leased cursors with a backlog fetch on lanes
// instead (lanes.go). A lane is a loop of the same code whose connection,
// its conn, is a lane, not the broker's (brokerConn). The loop's rounds
// never branch on which it is. Everything the cache keeps per broker (its
// loop, lanes, measured round trip and address) is one broker
// (broker.go). Each lane is on a connection of its own. It is a client of
// its own, with Config.ClientOpts, seeded with the broker's advertised
// address from the cursors' metadata only, since a fetch on its seed broker
// goes on that seed's fetch connection. A lane never waits. It asks only for offsets known to
// exist (a leased cursor is laneable while its fetch position is below the
// partition's end as its last fetch showed it, or below its range's end,
// which is planned below a listed end), with MaxWaitMillis 0, the leader
// epoch fencing a stale address, and keeps a round in flight for each of
// its cursors. So every leased cursor of the partition has its fetch in
// flight at once, and the partition gets their sum per round trip, not two
// fetches. A lane's fetch asks Config.LanePartitionBytes of each cursor
// (default 8 MiB, or FetchMaxPartitionBytes if larger), since what it asks
// for exists, and no more than what is left of its range and the batch in
// which it ends (leftAsk): the next range is read at once on another
// cursor, which would fetch again what this one brought past its end. A
// range of 10,000 × 1 KiB records takes 2 round trips instead of 10.
// Through a 50 ms proxy, with 1 partition, 1 MiB read 196 MB/s and 4 MiB
// read 310 MB/s; through a 100 ms proxy, since the lanes open together,
// 8 MiB read 370 MB/s and 4 MiB 324-329 (docs/benchmarks.md).
//
// A broker gets lanes only when the cache judges it distant, with its round
// trip Config.LaneMinRTT (2 ms) or more. Closer, reads stay on the
// broker's loop as before. An answer never comes sooner than the round
// trip, but a busy machine makes it come later (with every P busy, Go
// polls the network every 10 ms or so), so the judgement rests on the
// least answer, and a slow one counts only by what is left of it once the
// process's own delays around it are taken out (distance.go). A measure
// sends a metadata request without topics every 25 ms, without waiting for
// the answers before, on the shared client's normal connection. It does so
// as the engine lists a topic's partitions (Measure; Learn as a member
// joins), when a range with records to read joins the broker's loop, and
// again after 5 minutes. Around each it times how late a goroutine woken by
// the network poller runs (a pipe). That is the local delay. The first
// answer under LaneMinRTT, a probe's or any fetch's, proves the broker
// near. 6 probe answers that took LaneMinRTT and 8 times their local delay
// more, with none under LaneMinRTT, make it distant. An answer that came
// within 12.5 ms of the one before waited behind it (a stall of the broker,
// or of the connection) and counts only towards near: a distance spaces
// the answers as their requests were. A broker process stalled on a busy
// machine answers slowly while this one is quick, and the answers that
// waited behind the stall come with the first, which alone counts. A
// measure that reaches neither in 16 requests (a busy machine), or whose
// request fails, keeps the verdict, near until one is reached, and is
// repeated 250 ms later (10 s after a failure). Once distant, a
// broker is near again from its first answer under 3/4 of LaneMinRTT
// (hysteresis), and its lanes' cursors go back to its loop. With the CPU
// saturated by goroutines, kfake on loopback answers in 20 to 150 ms, with
// local delays of milliseconds, and stays near
// (TestLoopbackBrokerIsNearWithTheCPUSaturated). The measure before took
// the least of three probes sent at once, which one busy moment delayed
// together, and opened lanes to it. The first verdict of each broker is
// logged (Config.Logger, info level). The line says its measured round trip,
// and whether reads with a backlog use more fetch connections. A later measure that
// changes the verdict logs at debug level (TestBrokerVerdictIsLoggedOnce).
//
// A broker's lanes open together, FetchConnections-1 of them (default 3, so
// 4 fetch connections per broker), once one of its leased cursors is
// backlogged: laneable with at least 2 × FetchMaxPartitionBytes left, by
// the bytes per offset of its last answer, or before it a range that many
// records of 1 KiB would fill. Their connections open first,
// each with an empty fetch, then the broker's laneable cursors move to them.
// They open when the broker is judged distant, or already while its measure
// leans that way (3 quiet answers and none under LaneMinRTT): cursors move
// onto them only once it is judged distant, and lanes a near verdict leaves
// without cursors close after laneLinger. Opened one after another, as the
// backlog grew, each once the one before was open, they took three of the
// first ten round trips of a 410 MB read at 50 ms. A cursor goes to the
// least loaded open lane (the fewest cursors of its partition first, since
// a round takes one cursor of a partition). While some are still opening,
// an open one with its share of the broker's laneable cursors takes no
// more: the cursor waits on the broker's loop a round trip at most, so the
// ranges started together spread over every lane instead of all fetching on
// the first, which answers them one after the other. A cursor stays on its lane while laneable,
// except that a lane over 4 cursors gives one to a new lane after its next
// answer. It goes back to the broker's loop once caught up (fetched up to
// the partition's end, where a leased follower then long-polls), at its
// range's end, released, when an answer brings nothing (laneless until an
// answer does), and on any error of its fetch, which its holder handles as
// on the broker's loop (a leadership error relearns the leader through
// metadata, TestLaneRequestInFlightMeetsALeaderChange; a connection error
// fails the read, retriably, TestLaneConnectionDroppedWithARequestInFlight).
// A lane closes 3 s after its last cursor left (its goroutine closes its
// client). One whose connection fails gives the broker no new lane for
// 10 s. The lanes already open keep their ranges meanwhile, and may move
// ranges between themselves to even out, but none takes a range from the
// broker's loop.
// Followers, long polls and everything a caught-up reader does stay on
// the broker's loop, so a caught-up reader keeps its connections.
//
// Lane membership is which loop a cursor is in, like a move to a preferred
// replica, not a state of its lifecycle. No state or event of the table
// below is added, and laneable is a predicate on the state (leased) and the
// positions.
//
// # Following the tail
//
// In a continuous read (Config.OnHigh set), the engine asks the cache to
// Watch a caught-up partition at its end. The idle cursor there (or a new
// one) follows the tail. It stays in its broker's loop, long-polled, keeps
// what arrives, and each answer that shows the partition's end moved is
// reported to OnHigh. The engine then plans a range up to the new end, whose
// lease takes the follower and reads what it already holds. So a record is
// delivered within a round trip of being written, not at the next listing
// of watermarks, and a tail range holds a max_in_flight slot only while it
// delivers, never while it waits. A leased follower keeps fetching ahead.
// Released at the new end, it follows again. There is one follower per
// partition. Drop (revocation) forgets it. A range elsewhere in the
// partition never takes the follower (it gets another cursor), and a cursor
// sought for a range wants that range only, so the follower stays at the
// tail. A full IdleBufferBytes stops followers from keeping more, never a
// caught-up follower from long-polling. Its partition's new end is still
// reported, and its records are fetched again by the lease that reads them.
//
// # Leaders, epochs and truncation
//
// A cursor fetches from the partition's leader, with the leader epoch it
// learned from metadata (KIP-320 fencing). Metadata is requested per topic
// and shared by every cursor that needs it at the time (a thousand new
// cursors ask once). Learn asks before the cursors exist (the engine does
// when a group member joins and when partitions are assigned, while it
// lists them), so a start's first fetch does not wait for it. Learn also
// opens the fetch connection to each leader (an empty fetch) that has no
// fetch loop. franz-go sends a broker's requests one at a time and opens a
// connection in that turn, so a connection opened by the first fetch, or
// while the assigned partitions are listed, delays them (a dial and an
// ApiVersions exchange, plus a TLS handshake and a SASL login where
// configured). The member's join is the time to open it
// (TestLearnOpensTheFetchConnections). NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
// UNKNOWN_LEADER_EPOCH and the other leadership errors take the cursor out
// of its loop. Its holder learns the new leader from metadata requested
// after the error and puts it into that broker's loop, at most
// maxLeaderRetries (10) times in one Read (20 ms, 40 ms, ... between tries).
// The retries restart after every fetch that succeeds. An idle follower is
// revived the same way by a goroutine of its own. A revival that follows
// another with no fetch served in between first waits (100 ms doubling to
// 5 s), so a leader that keeps failing its fetches, or a broker that closes
// every connection, is not dialled and asked again at once
// (TestFollowerBacksOffFromABrokerThatDropsItsFetches). An idle cursor also
// drops the batches it fetched and did not decode. They came from the old
// leader, and only the decoded position is validated, so they are fetched
// again from it (TestFollowersQueuedBatchesAreValidatedAfterALeaderChange).
// After such an error, if records were fetched, the position is validated
// before the next fetch.
// OffsetForLeaderEpoch asks the new leader where the epoch of the last
// fetched batch (read from the batch headers) ends in its log. An end below
// the fetch position means the log was truncated under the reader (an
// unclean election). Read returns a *LogTruncatedError naming the offsets
// that are gone, never reads on. A leader that answers "epoch unknown"
// (Kafka does so only for epochs newer than its own, kfake also when
// nothing was written since the epoch changed) is checked by its high
// watermark instead. A seek forgets the epoch. A range that starts away
// from the position is not validated against what was read before it.
// Dropping kept records (Capacity, IdleBufferBytes) is not a seek. The
// position keeps its epoch, and is validated after a leader change like any
// other. A new cursor has no epoch. One created after an idle eviction, an
// error or a restart does not detect a truncation below its start. The Java
// consumer commits the epoch with the offset and validates on resume. The
// cache is not told the committed epoch.
//
// Follower fetching (KIP-392) works as follows. With Config.Rack set, every
// fetch carries the rack. A leader whose broker has a rack-aware replica selector answers
// with a preferred read replica, and the cursor moves to that broker's loop.
// Any error from the replica (it lags, or is gone) moves it back to the
// leader, asked without the rack for 100 ms and 16 fetches, both doubling
// with each failure in a row (to 30 s and 1,024). After that the leader may
// point at a replica again. The while is counted in fetches too, so a slow
// fetch (a distant broker, a busy machine) does not end it after one fetch
// or two.
//
// # Errors
//
// Every error names the topic and partition (and the offset where it
// matters) and wraps its cause with %w. Permanent classifies them.
//
//   - Permanent (retrying cannot fix them; stop and report):
//     ErrOffsetOutOfRange (*OffsetOutOfRangeError), ErrLogTruncated
//     (*LogTruncatedError), ErrTopicRecreated, ErrUnknownPartition (the
//     metadata says the topic or partition does not exist; a fetch that
//     says so while metadata disagrees is retried as a leadership error),
//     ErrCorrupt (a batch that cannot be decompressed or decoded, or that
//     yields no record fetch after fetch; the records before it are
//     delivered and pos is its offset, so nothing is skipped), and
//     refusals of access (internal/kerrs' one list: authorisation,
//     SASL authentication), which are returned at once, the kerr error
//     preserved, never retried inside the cache.
//   - Retriable (back off and read again from pos, with a new cursor since
//     the failed one is released with the error): a fetch request that
//     failed (network errors), broker errors, leadership that did not
//     settle within Read's retries (the broker's kerr error wrapped).
//   - Context errors: the caller stopped the read.
//
// An error from emit is returned as is. The client retries some requests
// itself (metadata, by RetryTimeout). The cache adds no retries of its own
// beyond the leadership ones above.
//
// # Why the cache fetches by itself
//
// The alternative is kgo's own consumer, one client per partition
// (kgo.ConsumePartitions, SetOffsets to seek), which this package used
// before as a prototype. Reading on was a draw, a seek cost about 7 times
// more time and 8 times more memory (kgo drops what it read ahead and waits
// for its source loop), a range whose last offsets hold no record at the
// end of the log could not complete (kgo does not expose its fetch
// position), and every client held its own connections. One kgo consumer
// for all partitions would share connections but reads ahead on every
// assigned partition and exposes no per-partition position or seek without
// a round of its source loop. So the cache issues its own fetches on the
// shared client's connections. The price is what it does itself. It follows
// leaders, fences epochs, detects truncations and selects replicas.
//
// # Lifecycle
//
// A cursor released with an error is forgotten, never reused. Capacity
// bounds the idle cursors, followers aside, that keep fetched records (the
// least recently used drop theirs beyond it, keeping their position).
// IdleBufferBytes bounds the bytes that all idle cursors keep, followers
// included. It is checked at every release and after every fetch answer. A
// released cursor whose read-ahead met a leadership or connection error
// relearns its leader. An error of the data (a truncation, an offset out of range) stays
// for its next lease. Idle cursors are forgotten after Config.IdleTimeout by
// a janitor goroutine. Followers are not, nor a cursor that holds a
// truncation it detected, which a new cursor (without the epoch) would read
// past (TestFollowersDetectedTruncationSurvivesTheJanitor). A leased cursor
// is never forgotten under its holder. Close stops the janitor and the loops and forgets every
// cursor. Reads still waiting when Close's context ends fail with ErrClosed.
// Close is safe to call twice.
//
// # Cursor states
//
// Who holds a cursor, and what it keeps for whom, is one state, changed
// only by events, each allowed from the states drawn here and nowhere
// else. A state change the drawing does not show is a bug. The cache
// refuses it, leaves the cursor as it was, and the partition's next
// Acquire returns an error wrapping ErrInternal that names the partition,
// the state and the event (Stats.Refused counts them).
//
//   - new: just created, for a lease (Acquire) or to follow (Watch).
//   - leased: its lease holder's. A leased follower keeps fetching ahead.
//   - idle: nobody's; keeps its position and what it fetched past it.
//   - following: nobody's, in its broker's loop, following the tail; at
//     most one per partition, counting revivingFollower.
//   - reviving, revivingFollower: its revival goroutine's, learning the
//     leader (and validating the position); back to idle or following.
//   - failed: nobody's, keeps an error for its next lease that a new cursor
//     would meet too (an offset out of range, an unknown or recreated topic,
//     a denied authorisation); the janitor may forget it.
//   - truncated: nobody's, keeps a truncation its revival detected for the
//     next lease at its position. Only this cursor knows it (a new one has
//     no epoch), so the janitor leaves it, a lease elsewhere in the
//     partition does not take it, and a lease at its position takes it
//     before any other cursor there; Drop, a recreated topic and Close
//     forget it.
//   - gone: forgotten.
//
// The transitions (TestStateDiagramMatchesTheTable keeps this drawing and
// the table in state.go in step; TestForbiddenTransitionsAreRefused tries
// every other pair):
//
//	new               --lease-->          leased
//	new               --follow-->         following
//	leased            --release-->        idle
//	leased            --releaseFollow-->  following
//	leased            --releaseFailed-->  failed
//	leased            --discard-->        gone
//	idle              --lease-->          leased
//	idle              --follow-->         following
//	idle              --revive-->         reviving
//	idle              --fail-->           failed
//	idle              --evict-->          gone
//	idle              --forget-->         gone
//	following         --lease-->          leased
//	following         --unfollow-->       idle
//	following         --revive-->         revivingFollower
//	following         --fail-->           failed
//	following         --forget-->         gone
//	reviving          --revived-->        idle
//	reviving          --fail-->           failed
//	reviving          --truncate-->       truncated
//	reviving          --evict-->          gone
//	reviving          --forget-->         gone
//	revivingFollower  --revived-->        following
//	revivingFollower  --unfollow-->       reviving
//	revivingFollower  --fail-->           failed
//	revivingFollower  --truncate-->       truncated
//	revivingFollower  --forget-->         gone
//	failed            --lease-->          leased
//	failed            --evict-->          gone
//	failed            --forget-->         gone
//	truncated         --lease-->          leased
//	truncated         --forget-->         gone
//
// The events: lease (Acquire), release (Release without an error),
// releaseFollow (the same, for a cursor that followed before its lease or
// stops where the follower waits, which it replaces), releaseFailed (the
// same, keeping an error of the data its fetch ahead saw), discard
// (Release with an error, or after Close), follow (Watch), unfollow
// (another cursor follows now), revive (a leadership or request error of
// an idle cursor's fetch, or a follower without a known leader), revived
// (the leader learnt), fail and truncate (the error a fetch or a revival
// keeps for the next lease), evict (the janitor, after IdleTimeout) and
// forget (Drop, a recreated topic, Close, a follower replaced).
// FuzzCursorModel and TestCursorModelWalk drive random sequences of them,
// and of the fetch loop's rounds, through the real transition function
// against a model of the invariants (among them cursor.validate, and that a
// cursor being revived queues nothing), and then a broker's loop, its lanes
// and its round-trip measures against the lanes' promises checked at every
// step (lanes_model_test.go: the verdict is the rule's, no cursor on a lane
// of a near broker, no lane opened to one unless its measure leans
// distant, FetchConnections-1 lanes for a backlog, a range's records in
// order once); `make mutate` (resources/mutate) checks that they
// catch injected bugs.
//
// # Memory
//
// What the cache holds, with B brokers, L leases held at once and N cursors
// open (one per partition followed or read, one more per range of a
// partition read in parallel), is at most (Config.MemoryBound):
//
//	B × 2 × FetchMaxBytes                  responses in flight on the brokers' loops (two rounds each)
//	+ L × LanePartitionBytes               responses in flight on lanes (one fetch per leased cursor)
//	+ L × 3 × P                            a leased cursor: two answers queued, one decoding (P: the largest of FetchMaxPartitionBytes, RoundBytes and, with lanes, LanePartitionBytes)
//	+ FetchMaxBytes                        responses leased cursors' answers share (pinned)
//	+ IdleBufferBytes                      what idle cursors keep, followers included
//	+ N × 2 KiB + 1 MiB                    the cursors, the client and its metadata
//	+ B × (FetchConnections-1) × 256 KiB   the lanes' clients
//
// A batch larger than the limits counts at its size (Kafka returns it whole,
// KIP-74), and a leased cursor's decoded batches count decompressed. With
// the defaults at 1,000 partitions on one broker and 16 leases that is
// 100 + 128 + 384 + 50 + 32 + 3 + 0.75 MiB. With FetchConnections 1,
// 100 + 48 + 50 + 32 + 3 MiB. Lanes add the second and the last terms and
// raise the third. A leased cursor is in one round at a time, on a lane or
// on its broker's loop, a lane's round asks LanePartitionBytes (default
// 8 MiB, or FetchMaxPartitionBytes if larger) of each of its cursors, and
// a leased cursor may hold lane answers
// (TestHeapWithinTheMemoryBoundOnLanes). Records handed to emit are the
// caller's.
//
// Kept bytes are the bytes really retained, since a sub-slice pins its
// whole buffer. A leased cursor's answer in a round of several partitions
// stays in the response, which its holder decodes soon: the response's
// bytes count once (Cache.pinned, at most FetchMaxBytes in all) until the
// last such answer is decoded or dropped, and a response that does not fit
// has its answers copied out, as an idle cursor's answer always is. A
// cursor whose lease ends copies what it still queues of a shared response
// (copying every answer was 15 to 18% of the input's CPU at 256
// partitions). A round of one partition keeps the response, which is about
// its answer. A cursor released with decoded records moves them
// (keys, values, headers, the records themselves) into memory of their own,
// since kgo decodes them in place in the response or the decompressed batch
// and allocates a batch's records in one slab. Stats.Kept is that sum.
// TestHeapWithinTheMemoryBound compares the heap with the bound at 1,000
// followed partitions.
package cache
