package logs

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// lines records what is logged, by level.
type lines []string

func (l *lines) Debugf(f string, a ...any) { *l = append(*l, "DEBUG "+fmt.Sprintf(f, a...)) }
func (l *lines) Infof(f string, a ...any)  { *l = append(*l, "INFO "+fmt.Sprintf(f, a...)) }
func (l *lines) Warnf(f string, a ...any)  { *l = append(*l, "WARN "+fmt.Sprintf(f, a...)) }
func (l *lines) Errorf(f string, a ...any) { *l = append(*l, "ERROR "+fmt.Sprintf(f, a...)) }

func TestWithPrefix(t *testing.T) {
	var got lines
	l := WithPrefix(&got, "Member 2 of 4 (100%): ")
	l.Debugf("a %d", 1)
	l.Infof("b %s", "x")
	l.Warnf("c")
	l.Errorf("d %v", fmt.Errorf("e"))
	assert.Equal(t, lines{
		"DEBUG Member 2 of 4 (100%): a 1",
		"INFO Member 2 of 4 (100%): b x",
		"WARN Member 2 of 4 (100%): c",
		"ERROR Member 2 of 4 (100%): d e",
	}, got)
	_, tracer := l.(Tracer)
	assert.False(t, tracer, "a prefixed Logger forwards no lines below debug")
	assert.Same(t, &got, WithPrefix(&got, "").(*lines), "an empty prefix returns the Logger itself")
}

func TestDiscardIsALogger(t *testing.T) {
	var l Logger = Discard{}
	l.Errorf("nothing %d", 1) // no panic, no output
}
