package sandbox

import (
	"strings"
	"testing"
)

func TestAdvisories(t *testing.T) {
	tests := []struct {
		runc    string
		wantCVE bool
	}{
		{"1.1.5+ds1", true}, {"1.2.7", true}, {"1.2.8", false}, {"1.3.2", true}, {"1.3.3", false}, {"v1.4.0", false}, {"", false},
	}
	for _, tt := range tests {
		got := EngineInfo{RuncVersion: tt.runc, ServerVersion: "28.0.1", Runtimes: []string{"runc", "runsc"}}.Advisories("runc")
		hasCVE := strings.Contains(strings.Join(got, "\n"), "CVE-2025-31133")
		if hasCVE != tt.wantCVE {
			t.Errorf("Advisories(runc %q) warns of the CVEs: %v; want %v", tt.runc, hasCVE, tt.wantCVE)
		}
	}
	a := EngineInfo{ServerVersion: "20.10.24+dfsg1", RuncVersion: "1.1.5+ds1"}.Advisories("runsc")
	all := strings.Join(a, "\n")
	if !strings.Contains(all, "end of life") || strings.Contains(all, "--runtime runsc runs") || !strings.Contains(all, "userns-remap") {
		t.Errorf("Advisories() = %q", a)
	}
}
