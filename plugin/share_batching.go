package plugin

import (
	"context"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// readBatched is ReadBatch with a batching policy.
func (in *shareInput) readBatched(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	var parts []partAck
	for {
		p := in.tail
		in.tail = nil
		if p == nil {
			if len(parts) > 0 && in.members.Queued() == 0 {
				break // the next fetch waits for these
			}
			wctx, cancel := ctx, context.CancelFunc(func() {})
			if d, ok := in.batcher.UntilNext(); ok && len(parts) > 0 {
				wctx, cancel = context.WithTimeout(ctx, max(d, 0))
			}
			b, err := in.receive(wctx)
			cancel()
			if err != nil {
				if len(parts) > 0 && ctx.Err() == nil {
					break // flush what is held; the error comes next time
				}
				return nil, nil, err
			}
			p = in.part(b)
		}
		full := false
		for i, m := range p.msgs {
			if !in.batcher.Add(m) {
				continue
			}
			full = true
			if i < len(p.msgs)-1 {
				head, tail, ok := p.b.Split(i + 1)
				if !ok { // Close released it on the way
					return nil, nil, service.ErrEndOfInput
				}
				parts = append(parts, partAck{b: head, idx: p.ack.idx, offset: p.ack.offset})
				in.tail = &sharePart{b: tail, msgs: p.msgs[i+1:], ack: partAck{b: tail, idx: p.ack.idx, offset: p.ack.offset + i + 1}}
				p = nil
			}
			break
		}
		if p != nil {
			parts = append(parts, p.ack)
		}
		if full {
			break
		}
	}
	msgs, err := in.batcher.Flush(ctx)
	if err != nil {
		for _, p := range parts {
			in.nack(p.b, err)
		}
		return nil, nil, err
	}
	if len(msgs) == 0 { // the policy's processors dropped every message
		for _, p := range parts {
			p.b.Ack()
		}
		return in.readBatched(ctx)
	}
	return msgs, in.ackFunc(parts), nil
}
