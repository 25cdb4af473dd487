// Package engine is the Benthos-free core of the kafka_batched_ranges input.
// It plans offset ranges, reads them through the partition-pinned consumer
// cache, hands their records out as batches, tracks acknowledgements and
// commits each partition's contiguous acknowledged frontier.
//
// # Lifecycle
//
// New checks a Config. Start lists the topics and watermarks, per topic and
// per partition, and starts the goroutines. A partition that cannot be
// listed is retried while the others are read. With Membership the engine
// joins the consumer group (internal/group) and reads the partitions the
// group assigns. The listings and the cursors then move from the start's
// client (which fails fast on a TLS or SASL mistake) to the member's. So
// there is one client, with the connections of one franz-go group consumer
// (internal/cache/doc.go). Next
// hands out batches. (*Batch).Ack and Nack finish them. Next returns ErrEnd
// once nothing more will be read and every batch handed out is done. Close
// stops everything, commits the acknowledged progress a last time and closes
// every client. Err says why the engine stopped early, if it did.
//
// With RegexpTopics the topic entries are patterns (patterns.go). The
// scheduler's refresh lists the topics every poll interval. Every
// MetadataMaxAge it lists every topic of the cluster to match them again.
// It reads new matches as partitions created after the start. With
// Membership, the member subscribes to them and the group assigns them.
//
// # Goroutines and who owns them
//
// Start starts three goroutines. The scheduler (scheduler.go) plans ranges
// and starts them. The reporter (observe.go) reports metrics, progress and
// reachability. With a group, the committer (commit.go) commits. The
// scheduler starts a reader (scheduler.go, emit.go) for each range in
// flight. It also starts a refresher (refresh.go), one at a time, which
// looks at the cluster. Each of these goroutines is a type of its own
// (reader, reporter, refresher), as kgo's source is. Such a type holds what
// is its goroutine's own and changes the rest through the owners' methods.
// All of them stop through the engine's shutdown signaller. A reader also
// stops when its partition is revoked. Close waits for all of them. Its
// finisher goroutine (close.go) makes the final commit and releases the
// clients, even when Close's context ends first. It does so within
// finalCommitTimeout and releaseTimeout, below Benthos' shutdown_timeout.
// No timer outlives a call. Nacked batches wait in a queue that Next
// serves when they are due. The group member's handler (membership.go)
// runs on franz-go's group goroutine.
//
// # State and locks
//
// The engine's state is split by owner, as Kafka's Java consumer splits
// its state (SubscriptionState, Fetcher, ConsumerCoordinator) and as
// franz-go's kgo does (its consumer and group consumer). Each owner's
// behaviour is its own methods.
//
//   - Engine: the configuration (Config, the Observer, the topic patterns),
//     whether it started and why it stopped, and its goroutines. Its
//     methods are its API and the events that span owners. Those are a
//     range complete (ackLocked), an incarnation started or dropped (startLocked,
//     dropLocked), a commit answered (sendCommit), a topic gone.
//   - limitedLog (Engine.log, warn.go): the Logger and the limit of
//     repeated lines.
//   - clients (Engine.kafka, engine.go): the cluster's client, the cursor
//     cache, the reachability hooks and the topics' IDs.
//   - partTable (Engine.parts, table.go): every partition's record, with
//     the planner and the tracker. Where an incarnation starts, its cuts,
//     its losses and what it waits for are the table's methods too.
//   - scheduler (Engine.sched, scheduler.go, refresh.go): the slots
//     (slots.go: the max-in-flight count), the readers running and the
//     refresh's own state.
//   - groupState (Engine.group, commit.go, membership.go): the engine's
//     side of its consumer group. It holds the committer and the commit
//     lock, the group member and what the engine knows of its ownership.
//     It is not Kafka's group coordinator (the broker it talks to).
//   - delivery (Engine.out, batch.go): the readers' channel to Next, the
//     replays, the end markers, the drains' wake, the pause's hold
//     (pause.go: pauseGuard) and the settle's.
//   - observation (Engine.stats, observe.go): counters and progress.
//
// An owner's fields are written only in its own files
// (TestOwnersWriteOnlyTheirOwnFields). Engine keeps at most 40 methods
// (TestEngineKeepsOnlyEventsAcrossOwners).
//
// One mutex, Engine.mu, guards the table and the fields each type's doc
// says it guards. It is one lock because they change together. A dropped
// incarnation ends its record, frees its slots and moves the progress
// counts at once. A method named ...Locked runs with it held. Nothing that
// can call back runs under it. So Config.Hooks.Prepare, the Observer,
// OnProgress and the group member's calls that wait for the group never run
// under it. The
// commit lock (groupState.lock) is taken before it, never under it. It is
// a token channel, so waiting for it ends with the waiter's context. reach
// and the line limit (warn.go) have locks of their own, taken last.
//
// # Incarnations
//
// A partition is read as one incarnation at a time. An incarnation is one
// ownership of it (an assignment by the group, or the whole run without
// one) of one topic (by topic ID). Every piece of per-partition state
// belongs to one. That holds for the engine's incarnation struct (its inc,
// unique within the engine), each range in flight (rangeState.part), each
// batch (Batch.Incarnation) and each partition waiting for its watermarks
// (waiting.inc). Revoking, losing or dropping a partition
// (its topic deleted or recreated) ends its incarnation. Assigning it again
// starts a new one from the group's committed offset. What flows back from an
// ended incarnation is compared with the partition's current incarnation.
// If older, it is dropped, never applied. The tracker and the planner only
// ever see the current one. What the pipeline sends back (an Ack, a Nack, a
// replay that comes due) is also counted (Summary.Stale, the observer's
// Stale), once per acknowledgement of the pipeline (with AckAll and
// NackAll the parts of one cut batch count once). What the engine itself produces (a
// reader that finishes, a loss it saw, a batch sent as its incarnation
// ended) is dropped without being counted, logged at DEBUG. So eager
// rebalances (every partition revoked and the kept ones handed back), lost
// sessions and recreated topics cannot corrupt state, whatever is still in
// the pipeline. In ordered mode a new incarnation of a partition is read
// only once no batch of an earlier one is in the pipeline (record.ended),
// so a partition that comes back to the process stays in offset order.
// With a group, a partition starts from the group's view. One new to the
// group is read from its first offset (groupNew), a range another member
// cut short is planned the same (cuts.go), and a recreated topic that the
// member still owns is read again.
//
// # The partition table
//
// What the engine knows of a partition across its incarnations is one
// record in one table (table.go: partTable, Engine.parts), and no other map
// is keyed by partition (the planner and the tracker, whose entries are
// of the partitions being read, are the table's too). A record holds its
// lifecycle state, the incarnation being read (record.cur, whose inc names it) or the one
// it waits to start as (record.wait), whether it existed at the start and
// how it then starts where the group has no offset, the group's committed
// offset as last listed, the batches of it in the pipeline (each counted
// once, in its incarnation while that is current, then in record.ended),
// the range the group cut short (cuts.go), the lost spans not logged yet
// (loss.go), and with a bounded group run its snapshot end or why that
// could not be listed yet. Every field of a record changes through
// partTable's methods, and what the events started and dropped imply
// beyond the record (the planner, the tracker, the readers, the slots)
// is done beside apply (startLocked, dropLocked).
//
// The lifecycle is one stored state. It is idle (not read, because never
// listed, not assigned, revoked, lost or its topic gone), waiting (for its
// watermarks, to start a new incarnation), reading, or uncommitted
// (start_from committed and the group has no offset, so not read). It
// changes only through partTable.apply, which looks the (state, event) pair
// up in a table of allowed transitions (table.go draws it) and refuses any
// other pair with an error that stops the engine, naming the partition, the
// state and the event. The events are assigned, queued (Start listed it
// without its watermarks), topicBack, started, skipped, released (revoked,
// lost or its topic gone while not read), dropped (the incarnation being
// read ends). "Done" (a bounded run read it to its end) stays reading, with
// nothing left to plan. FuzzPartitionTable and TestPartitionTableModelWalk
// (table_walk_test.go) drive random event sequences through the engine's own
// methods, without Kafka. The events are assignments, revocations with their
// drain, lost sessions, listings (stale answers too), ranges read, batches
// handed out, acknowledged, rejected and split, commits (some refused),
// offsets deleted under a reader, topics deleted and created again, under
// every start_from and with explicit start offsets, in ordered mode too. A
// model checks after each event what must always hold. That is where an
// incarnation starts, what is committed, lost and counted, the slots, and
// under ordered one range of a partition in flight. A bounded (stop_at end)
// walk is then drained and must end with every partition at its snapshot
// end. One that stalls fails, naming each partition's state.
// pause_walk_test.go walks the pause guard the same way, with beats,
// confirmations and lost sessions. `make mutate` (resources/mutate) checks
// that they catch injected bugs.
//
// The files are engine.go (the Engine, its clients, New, Start and its
// steps), prepare.go (what Start lists), table.go (the table and its
// transitions), start.go (where an incarnation starts), scheduler.go (the
// scheduler: planning and reading ranges), refresh.go (the scheduler's look
// at the cluster: topics, watermarks, deleted topics, the tail), emit.go
// (batches out of a read, in order), batch.go (delivery: Next, Ack, Nack,
// Split), slots.go (the max-in-flight slots), commit.go (groupState: the one
// commit path of the timer, the final commit and a revocation),
// membership.go (the group's assignments, revocations and losses), drain.go
// (revoked partitions' drain, the settle of a group's first assignment),
// pause.go (a paused process's hold), cuts.go (cut ranges shared by the
// group), loss.go (data loss), uncommitted.go (start_from committed),
// missing.go (topics that do not exist yet), patterns.go (topic patterns),
// cluster.go (listings), observe.go (observation: the Observer, the
// reporter, Progress), progress.go (the progress line's rate), startlog.go
// (the start's log line), reach.go (reachability), warn.go (repeated log
// lines), kafkalog.go (franz-go's logs), acked.go (the acknowledged offsets
// above a commit, in its metadata, skipped by the incarnation that starts
// there), endstall.go (what a bounded read that handed out everything waits
// for), waiting.go (what each partition of a read that has not ended waits
// for), config.go, errors.go, close.go (stopping: Err, Close and the
// finisher).
//
// # Revocations
//
// A revocation (group.Handler's Revoked, which the rebalance waits for) first
// drains the revoked partitions (drain.go). Nothing more of them is read or
// handed out, and it waits, at most Config.Group.RevokeDrainTimeout, until
// every batch of them handed out by Next is done. Then it commits their
// acknowledged frontier and ends their incarnation. So the next owner starts
// where this one's pipeline got to, and a graceful handover delivers nothing
// twice. A lost session ends the incarnations at once, without a commit.
//
// With Config.Group.Settle (the plugin sets it for bounded group runs),
// Next hands out nothing until the member's first assignment has not
// changed for that long and the coordinator reports the group stable
// (drain.go). Members started together (N workers splitting one backfill)
// join a moment apart. The partitions that move between them at the start
// then move before any batch of them was handed out. So their drains end at
// once and nothing is delivered twice, however slow the pipeline.
// The ranges are read meanwhile.
//
// # Counting
//
// A batch is counted only once Next has handed it out, and uncounted when it
// is acknowledged, nacked without replay, or dropped while stopping, so no
// stop path leaves a count that Next would wait for. What is acknowledged is
// recorded in one place, the ranges.Tracker, at the granularity of batch
// spans. The frontier it reports is what is committed, and a range is
// complete when all of its offsets are acknowledged. A caller that cuts
// batches anew (the plugin's batching policy) splits them (Batch.Split).
// Each part is counted and acknowledged on its own, so the spans stay exact.
// With Config.RangeEnds such a caller learns from an end marker when a range
// will hand out nothing more.
//
// # Errors
//
// Errors are classified once (errors.go). Permanent ones (data loss, a
// truncated log, a corrupt batch, access denied) stop the engine with a
// message naming topic, partition and offsets. A topic that vanished is
// checked again and either dropped (every offset read) or reported with the
// exact span lost. Everything else is retried with a growing delay and
// logged at most once per 10 s per partition, with the attempt number.
//
// # Logs
//
// The engine logs through Config.Hooks.Logger, and so do its franz-go
// clients (the cursors' client, which also lists, and the group member's,
// which does both from the join on, kafkalog.go). franz-go's debug lines go
// to TRACE when the Logger has Tracef (Benthos' has). Its info lines go to
// DEBUG. Its warnings and errors go to WARN, each at most once per 10 s per
// client.
package engine
