package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestProgressLineLabelsBothMeasures: the percentage is acknowledged offsets
// and the counts are delivered records, each labelled; large numbers are
// grouped; an unknown time left is not printed.
func TestProgressLineLabelsBothMeasures(t *testing.T) {
	for _, c := range []struct {
		name string
		p    Progress
		want string
	}{
		{"mid-read", Progress{Done: 70000, Total: 200000, Records: 95551, Bytes: 16_700_000, Elapsed: 3400 * time.Millisecond, Rate: 277755.4, Left: 700 * time.Millisecond},
			"Progress: acknowledged 35.0% of 200,000 offsets; delivered 95,551 records, 16.7 MB in 3.4 s; 277,755 records/s; about 0.7 s left"},
		{"nothing acknowledged yet", Progress{Done: 0, Total: 200000, Records: 15000, Bytes: 3_000_000, Elapsed: 200 * time.Millisecond, Rate: 75000, Left: -1},
			"Progress: acknowledged 0.0% of 200,000 offsets; delivered 15,000 records, 3.0 MB in 0.2 s; 75,000 records/s"},
		{"long", Progress{Done: 1_234_567_890, Total: 2_000_000_000, Records: 1_234_567_890, Bytes: 999, Elapsed: 754 * time.Second, Rate: 1_000_000, Left: 190 * time.Second},
			"Progress: acknowledged 61.7% of 2,000,000,000 offsets; delivered 1,234,567,890 records, 0.0 MB in 12m34s; 1,000,000 records/s; about 3m10s left"},
		{"empty read", Progress{Total: 0, Left: -1},
			"Progress: acknowledged 100.0% of 0 offsets; delivered 0 records, 0.0 MB in 0.0 s; 0 records/s"},
		{"small counts", Progress{Done: 5, Total: 600, Records: 999, Rate: 12.4, Elapsed: 59940 * time.Millisecond, Left: 30 * time.Second},
			"Progress: acknowledged 0.8% of 600 offsets; delivered 999 records, 0.0 MB in 59.9 s; 12 records/s; about 30.0 s left"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := c.p.String()
			assert.Equal(t, c.want, got)
			assert.NotContains(t, got, "unknown")
		})
	}
}
