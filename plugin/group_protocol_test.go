package plugin

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestInputConsumerProtocol runs YAML with group_protocol: consumer end to
// end against kfake (which serves KIP-848): the input joins the group with
// the consumer protocol and logs so, reads every record once with
// stop_at: end, and the group committed the end offsets.
func TestInputConsumerProtocol(t *testing.T) {
	const (
		topic      = "next-gen"
		group      = "kip848"
		partitions = 4
	)
	addr := newKafka(t, topic, partitions)
	adm := newAdmin(t, addr)
	produced := produceRecords(t, addr, topic, partitions, 0, 2000)
	res := runStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ next-gen ]
  consumer_group: kip848
  group_protocol: consumer
  group_remote_assignor: range
  stop_at: end
  max_range_records: 250
  commit_period: 50ms
`, nil)
	requireEnded(t, res)
	assert.Equal(t, len(produced), len(countByPos(t, res.msgs)))
	assert.Equal(t, len(produced), len(res.msgs))
	assert.Equal(t, endOffsets(t, adm, topic), committedOffsets(t, adm, group, topic), "committed offsets, want the end offsets")
	assert.Contains(t, res.log.String(), "this member runs the consumer group protocol")
}

// TestInputBrokerAssignorUnanswered: with group_protocol: consumer and
// group_remote_assignor empty (the broker's default) the input reads the
// coordinator's group.consumer.assignors; kfake does not know the setting,
// so connecting fails with an error naming the field and the setting, not a
// silent guess.
func TestInputBrokerAssignorUnanswered(t *testing.T) {
	addr := newKafka(t, "next-gen", 2)
	res := runStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ next-gen ]
  consumer_group: kip848
  group_protocol: consumer
  stop_at: never
`, nil)
	log := res.log.String()
	assert.Contains(t, log, connectFailed)
	assert.Contains(t, log, "group_remote_assignor empty (the broker's default)")
	assert.Contains(t, log, "does not say its group.consumer.assignors")
	assert.Empty(t, res.msgs)
}
