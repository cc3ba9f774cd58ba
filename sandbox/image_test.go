package sandbox

import (
	"os"
	"path/filepath"
	"testing"
)

func TestAptMirror(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{
			name: "deb822 with security and third parties",
			files: map[string]string{
				"sources.list.d/debian.sources":     "Types: deb\n# http://snapshot.debian.org/archive/debian/20250520T000000Z\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\nTypes: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\n",
				"sources.list.d/nodesource.sources": "Types: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\nComponents: main\n",
			},
			want: "http://deb.debian.org/debian",
		},
		{
			name:  "one-line with options",
			files: map[string]string{"sources.list": "# comment\ndeb [arch=amd64 signed-by=/x.gpg] http://mirror.example/debian/ bookworm main\n"},
			want:  "http://mirror.example/debian/",
		},
		{
			name:  "security only",
			files: map[string]string{"sources.list": "deb http://security.debian.org/debian-security bookworm-security main\n"},
			want:  "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, text := range tt.files {
				p := filepath.Join(dir, name)
				os.MkdirAll(filepath.Dir(p), 0o755)
				os.WriteFile(p, []byte(text), 0o644)
			}
			got, err := AptMirror(dir)
			if got != tt.want || (tt.want == "") != (err != nil) {
				t.Errorf("AptMirror() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func FuzzAptMirror(f *testing.F) {
	f.Add("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie\n", "deb http://x/debian sid main")
	f.Fuzz(func(t *testing.T, deb822, oneLine string) {
		_ = mirrorFromDeb822(deb822)
		_ = mirrorFromOneLine(oneLine)
	})
}

func TestPackagesCoverTheContract(t *testing.T) {
	want := []string{"python3", "python3-numpy", "python3-pandas", "python3-matplotlib", "python3-scipy", "python3-sklearn",
		"python3-seaborn", "python3-statsmodels", "python3-sympy", "python3-pil", "python3-openpyxl", "python3-bs4", "python3-requests"}
	have := map[string]bool{}
	for _, p := range Packages() {
		have[p] = true
	}
	for _, w := range want {
		if !have[w] {
			t.Errorf("Packages() lacks %s", w)
		}
	}
}
