// Package modelwalk runs a state machine's model test on random event
// sequences for a set time: the long runs of the engine's and the cache's
// model tests (`make model`), since go test -fuzz stalls on this project's
// machines after about a minute. It uses the standard library only.
package modelwalk

import (
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// Env names the variable that sets how long Run walks (a duration such as
// 30m); unset, it walks for two seconds, as in go test.
const Env = "KBR_MODEL_TIME"

// Run calls run with random byte sequences of even length, up to maxLen,
// until the time Env sets has passed or t failed, and then logs how many it
// ran with their seed, or the failing sequence with its seed.
func Run(t *testing.T, maxLen int, run func(ops []byte)) {
	t.Helper()
	d := 2 * time.Second
	if v := os.Getenv(Env); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("%s: %v", Env, err)
		}
	}
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	var ops []byte
	n := 0
	defer func() {
		if t.Failed() {
			t.Logf("seed %d, sequence %d: %#v", seed, n, ops)
		}
	}()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); n++ {
		ops = make([]byte, 2*rng.IntN(maxLen/2+1))
		for i := range ops {
			ops[i] = byte(rng.IntN(256))
		}
		run(ops)
		if t.Failed() {
			return
		}
	}
	t.Logf("%d sequences in %s, seed %d", n, d, seed)
}
