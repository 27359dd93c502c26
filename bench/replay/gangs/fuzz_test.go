package gangs

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestParseRanges(t *testing.T) {
	if lo, hi, err := ParseSizes("2-8"); err != nil || lo != 2 || hi != 8 {
		t.Errorf(`ParseSizes("2-8") = %d, %d, %v`, lo, hi, err)
	}
	if lo, hi, err := ParseSizes(" 4 "); err != nil || lo != 4 || hi != 4 {
		t.Errorf(`ParseSizes(" 4 ") = %d, %d, %v`, lo, hi, err)
	}
	if _, _, err := ParseSizes("two-8"); err == nil || !strings.Contains(err.Error(), `"two-8"`) {
		t.Errorf(`ParseSizes("two-8"): %v, want an error quoting the value`, err)
	}
	if lo, hi, err := ParseDurations("10m-4h"); err != nil || lo != 10*time.Minute || hi != 4*time.Hour {
		t.Errorf(`ParseDurations("10m-4h") = %s, %s, %v`, lo, hi, err)
	}
	if _, _, err := ParseDurations("10-4h"); err == nil || !strings.Contains(err.Error(), `"10-4h"`) {
		t.Errorf(`ParseDurations("10-4h"): %v, want an error quoting the value`, err)
	}
}

// FuzzParseRanges: no input panics, and what is read prints back to the same range.
func FuzzParseRanges(f *testing.F) {
	for _, s := range []string{"2-8", "4", "10m-4h", "1h", "-", "", "1-2-3", "1h30m-2h", " 3 - 5 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if lo, hi, err := ParseSizes(s); err == nil {
			lo2, hi2, err := ParseSizes(fmt.Sprintf("%d-%d", lo, hi))
			if err != nil || lo2 != lo || hi2 != hi {
				t.Fatalf("sizes %q read as %d-%d, which reads back as %d-%d (%v)", s, lo, hi, lo2, hi2, err)
			}
		}
		if lo, hi, err := ParseDurations(s); err == nil && lo >= 0 && hi >= 0 {
			lo2, hi2, err := ParseDurations(lo.String() + "-" + hi.String())
			if err != nil || lo2 != lo || hi2 != hi {
				t.Fatalf("durations %q read as %s-%s, which reads back as %s-%s (%v)", s, lo, hi, lo2, hi2, err)
			}
		}
	})
}
