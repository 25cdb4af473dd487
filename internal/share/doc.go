// Package share is the Benthos-free core of reading Kafka as a member of a
// share group (KIP-932, "queues for Kafka"). The broker hands each member
// records of any partition under a time-limited acquisition lock, counts
// their deliveries, and takes an acknowledgement per record: accept
// (processed), release (deliver again, to any member) or reject (archive).
// Many members can read one partition. There is no order within it and no
// bounded read.
//
// # Lifecycle
//
// New checks a Config. Start checks that every broker serves share groups
// (checkBrokers: the share requests are known and the cluster's
// share.version feature is 1 or more; otherwise an error wrapping
// ErrNoShareGroups names the broker, its version and share_group), joins
// the group through franz-go (kgo.ShareGroup) and starts the poll loop.
// Next hands out batches: acquired records of one partition, each with its
// delivery count (Record.DeliveryCount). (*Batch).Ack accepts them.
// (*Batch).Nack replays them in this member after a backoff
// (Config.ReplayNacks; otherwise releases them), or rejects those delivered
// Config.MaxDeliveries times. Close releases whatever is not acknowledged,
// sends every acknowledgement and waits for the answers, then leaves the
// group. Where a new member starts in a partition is the group's own
// setting, share.auto.offset.reset (latest by default), set on the group
// with IncrementalAlterConfigs, not by the reader.
//
// # Several members in one process
//
// Members (members.go) is n Readers of one group, each with its own
// client, whose batches one Next merges: the input's share_members. Start
// starts them, then one pump goroutine per member, which takes the
// member's batches from its Next and hands them over. Members.Next returns
// them, and once a member stopped on an error, that error. Close stops the
// pumps and closes every member at once (each releases what it holds). Stats
// sums their counts. A member's log lines start with "Member i of n: ".
//
// # One fetch at a time
//
// franz-go accepts, when a poll starts, every record of the previous poll
// that was not acknowledged. So the poll loop (run.go, the one goroutine,
// which owns the polls) polls only once every batch of the previous poll
// is done, and the client fetches only while polled
// (kgo.MaxConcurrentFetches(0)), at most Config.MaxRecords records
// (AcquireMode RecordLimit, kgo.ShareMaxRecordsStrict) or whole record
// batches of at least that many (BatchOptimized). What one member holds is
// bounded, so the others get the rest. The price is a round trip between
// the last batch of a fetch and the first of the next. More members (more
// readers) read in parallel, up to the group's in-flight limit of a
// partition (share.partition.max.record.locks: the broker acquires nothing
// past the partition's oldest record not acknowledged plus that many).
// The reader does not fetch ahead (kgo.MaxConcurrentFetches(1)). Its
// acknowledgements would wait behind the fetch in flight, which the broker
// holds up to the fetch's MaxWait when the members' records fill that
// limit (docs/benchmarks.md, issue 51).
//
// One fetch can still come early. franz-go allows the fetch its fetch loop
// asks for as soon as a poll took the buffered one, while that poll has not
// returned yet. Its records are acquired, their lock running, while the
// pipeline holds the last fetch's, and no poll hands them out before every
// batch of it is done (a few times in 300 polls on kfake; about one run in
// 40 of TestShareGroupSlowPipelineRenewsItsLocks on the real broker, whose
// second batch then lost its 3 s lock behind the first's 5 s of work). The
// reader keeps them, through the client's hooks, until a poll returns them
// and renews them as it renews batches (prefetch.go), from when they were
// fetched.
//
// # Batches
//
// A batch of the current fetch is queued (waiting for Next), out (in the
// pipeline) or done (accepted, released or rejected). It moves only through
// the transitions table (batch.go), under the reader's lock:
//
//	queued --handOut (Next)--> out --ack, nack--> done
//	queued, out --release (Close)--> done
//
// An Ack or Nack of a done batch (twice, or after Close released it) does
// nothing and is counted as stale. A batch leaves the pending set only
// after its acknowledgement reached the client, so the next poll can never
// accept it, and Close waits for acknowledgements under way before it
// flushes.
//
// # Renewals
//
// A pipeline slower than the broker's acquisition lock
// (group.share.record.lock.duration.ms, 30 s by default) would lose it: the
// broker delivers the records again and refuses their acknowledgement. So
// every half Config.RenewInterval the poll loop renews (kgo.AckRenew, Kafka
// 4.2+) the records of every batch not done (and those fetched early, not
// polled yet) that were acquired or renewed at least half an interval ago,
// and sends the renewals at once, without waiting for their answers (the
// loop hands out batches meanwhile). A partition whose last renewal the
// broker has not answered yet is renewed at a later tick: franz-go ignores
// the renewal of a record whose previous one is under way (nothing would
// answer it, and it would have been counted).
//
// The broker ties a member's share session to its ShareFetch connection:
// when that connection closes, the session ends and every record the member
// holds is released to the others, while its pipeline still processes them
// (they are then processed twice). A member holding records sends nothing
// on it but its renewals and acknowledgements, so the reader sets its
// client's kgo.ConnIdleTimeout (franz-go closes a connection idle that long;
// 30 s by default) to twice the renew interval when that is longer
// (connIdleTimeout).
//
// # Replays
//
// With Config.ReplayNacks (the input's auto_replay_nacks) a Nack does not
// give the records back to the broker, which would hand them straight back
// and archive them at the group's delivery count limit
// (share.delivery.count.limit, 5 by default) within seconds of an output
// outage: the records start over in a new batch, queued and due after a
// backoff (10 ms doubling to 1 s), which the poll loop hands out again when
// it is due. Its locks are renewed like any batch not done, and the next
// fetch waits for it like for any batch of the last one. Batch.DeliveryCount
// is the broker's count plus the member's replays. A record that reaches
// Config.MaxDeliveries is rejected. Close releases what waits for a replay.
//
// # Counting
//
// The reader logs through an internal/logs Logger and reports to an
// Observer that follows internal/logs' convention, as the engine does.
// Stats and the Observer count records acquired when a fetch brings them.
// They count records delivered when Next hands them out (the Observer only,
// as the engine's Delivered). They count replays when a Nack replays them.
// They count acknowledgements and renewals when the broker answers them
// (kgo.ShareAckCallback). Those the broker took count as accepted, released,
// rejected and renewed. Those count as lock expiries that it refused with
// INVALID_RECORD_STATE (the records are no longer acquired by this member),
// or that were made after the records' lock deadline (acquired or last
// renewed plus the group's share.record.lock.duration.ms), whatever the
// answer. A broker may take such an acknowledgement and deliver the records
// again all the same. Those count as failed that it refused for another
// reason (a share session that ended, a leader that moved), whose
// connection failed before the answer, or whose answer did not come before
// Close. A
// release the broker took of records on the last delivery the group allows
// is counted archived too. Refusals, late acknowledgements, rejections and
// archived records are logged at WARN with their offsets (the last two
// rate-limited: archive.go; the counts of an answer: answers.go).
//
// franz-go answers per partition and request, and a request carries every
// acknowledgement of the partition handed to the client before it was
// built, so the tally (ackTally, acks.go) hands a partition's
// acknowledgements over one set at a time (one status, one MarkAcks call),
// the next only once the broker answered the last. Each answer counts
// exactly its own records. The poll loop hands sets over when it polls (so
// the fetch carries them), every second, and when it renews. An answer
// hands over the partition's next set at once.
package share
