package engine

// slots is the max_in_flight count: how many ranges hold a slot now.
//
// A range takes a slot when it is launched (take). Without a group it gives
// the slot back once it is complete (give). With a group a complete range
// holds its slot (hold) until a commit covers it (releaseCommitted), so at
// most max_in_flight ranges lie past the committed offset. While a partition
// fails, its other open ranges lend their slots out (lend) and take them back
// once it reads again (reclaim). An incarnation that ends gives back every
// slot it holds (drop).
//
// Its invariant, which partTable.check asserts. used is the sum, over the
// incarnations being read, of their open ranges that did not lend their slot
// and their complete ranges waiting for a commit (incarnation.holding).
// Guarded by Engine.mu.
type slots struct {
	used int // ranges holding a slot
}

// free reports whether a range may take a slot of max.
func (s *slots) free(max int) bool { return s.used < max }

// full reports whether every slot of max is taken.
func (s *slots) full(max int) bool { return s.used >= max }

// take takes a slot for a range launched now.
func (s *slots) take() { s.used++ }

// give gives back the slot of a range complete without a group.
func (s *slots) give() { s.used-- }

// hold keeps the slot of p's complete range ending at end until a commit
// covers it.
func (s *slots) hold(p *incarnation, end int64) { p.held = append(p.held, end) }

// releaseCommitted gives back the slots of p's complete ranges that its
// committed offset covers. It returns how many it gave back.
func (s *slots) releaseCommitted(p *incarnation) int {
	released := 0
	kept := p.held[:0]
	for _, end := range p.held { // in completion order, not offset order
		if end <= p.committed {
			released++
		} else {
			kept = append(kept, end)
		}
	}
	p.held = kept
	s.used -= released
	return released
}

// lend gives back the slot of st, an open range of a failing partition,
// until the partition reads again (reclaim). It reports whether st had one
// to give.
func (s *slots) lend(st *rangeState) bool {
	if st.released {
		return false
	}
	st.released = true
	st.part.released++
	s.used--
	return true
}

// reclaimOne takes back the slot st lent, if it did (a range that completes
// while its partition still fails).
func (s *slots) reclaimOne(st *rangeState) {
	if st.released {
		st.released = false
		st.part.released--
		s.used++
	}
}

// reclaim takes back the slots p's open ranges lent. The count may pass
// max_in_flight for a moment. Nothing new is launched until it is below
// again.
func (s *slots) reclaim(p *incarnation) {
	for _, o := range p.open {
		if o.released {
			o.released = false
			s.used++
		}
	}
	p.released = 0
}

// drop gives back every slot of p, an incarnation that ends.
func (s *slots) drop(p *incarnation) { s.used -= p.holding() }

// holding returns how many slots p holds: its open ranges that did not lend
// theirs, and its complete ranges waiting for a commit.
func (p *incarnation) holding() int { return len(p.open) - p.released + len(p.held) }
