package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestReadmeDocumentsEveryFlag keeps the configuration reference honest:
// every flag, its variable and its default appear in README.md's table.
func TestReadmeDocumentsEveryFlag(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	var cfg config
	fs := flagSet("serve", true, &cfg)
	fs.VisitAll(func(f *flag.Flag) {
		var row string
		for _, l := range strings.Split(readme, "\n") {
			if strings.HasPrefix(l, fmt.Sprintf("| `--%s` |", f.Name)) {
				row = l
			}
		}
		if row == "" {
			t.Errorf("README.md has no row for --%s", f.Name)
			return
		}
		if !strings.Contains(row, "`"+envName(f.Name)+"`") {
			t.Errorf("README.md's row for --%s lacks %s", f.Name, envName(f.Name))
		}
		if f.DefValue != "" && !strings.Contains(row, "`"+f.DefValue+"`") {
			t.Errorf("README.md's row for --%s lacks its default %q", f.Name, f.DefValue)
		}
	})
}
