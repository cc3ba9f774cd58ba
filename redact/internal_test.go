package redact

import (
	"testing"

	"github.com/rs/zerolog"
	"github.com/zricethezav/gitleaks/v8/logging"
)

// TestGitleaksIsSilenced: gitleaks logs raw secrets at debug level; once a
// Redactor exists, its logger writes nothing.
func TestGitleaksIsSilenced(t *testing.T) {
	r := MustNew(Options{})
	r.String("ghp_" + "0123456789abcdefghij0123456789abcdef")
	if lvl := logging.Logger.GetLevel(); lvl != zerolog.Disabled {
		t.Errorf("gitleaks' logger level = %v; want disabled", lvl)
	}
	if r.det.Verbose {
		t.Error("gitleaks' verbose mode, which prints findings to stdout, is on")
	}
}
