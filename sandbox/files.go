package sandbox

import (
	"fmt"
	"path"
	"strings"
	"unicode"
)

// checkFiles checks a call's input files: relative clean paths of sane
// names, no duplicates, within the size limits. Its error names the file
// and says why.
func (s *Sandbox) checkFiles(files []InputFile) error {
	if len(files) > s.opt.MaxInputFiles {
		return fmt.Errorf("%d files; at most %d are accepted", len(files), s.opt.MaxInputFiles)
	}
	total := 0
	seen := map[string]bool{}
	dirs := map[string]bool{}
	for i, f := range files {
		if err := checkPath(f.Path); err != nil {
			return fmt.Errorf("files[%d] %q: %v", i, f.Path, err)
		}
		p := path.Clean(f.Path)
		if seen[p] || dirs[p] {
			return fmt.Errorf("files[%d] %q: the same path is given twice, or as a file and a folder", i, f.Path)
		}
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if seen[d] {
				return fmt.Errorf("files[%d] %q: %q is also given as a file", i, f.Path, d)
			}
			dirs[d] = true
		}
		seen[p] = true
		if len(f.Data) > s.opt.MaxInputFileBytes {
			return fmt.Errorf("files[%d] %q: %d bytes; at most %d per file", i, f.Path, len(f.Data), s.opt.MaxInputFileBytes)
		}
		total += len(f.Data)
		if total > s.opt.MaxInputBytes {
			return fmt.Errorf("files[%d] %q: the files pass %d bytes together; at most %d per call", i, f.Path, total, s.opt.MaxInputBytes)
		}
	}
	return nil
}

// checkPath accepts a relative path of ordinary names: no "..", no
// absolute path, no empty or dot names, no control characters, at most 8
// levels and 255 bytes a name.
func checkPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("the path is empty")
	case strings.HasPrefix(p, "/") || strings.HasPrefix(p, "\\") || (len(p) > 1 && p[1] == ':'):
		return fmt.Errorf("the path must be relative to /mnt/user-data, not absolute")
	case len(p) > 1024:
		return fmt.Errorf("the path is longer than 1024 bytes")
	case strings.Contains(p, "\\"):
		return fmt.Errorf("use / between folders, not \\")
	}
	parts := strings.Split(p, "/")
	if len(parts) > 8 {
		return fmt.Errorf("more than 8 levels of folders")
	}
	for _, part := range parts {
		switch {
		case part == "..":
			return fmt.Errorf("\"..\" is not allowed")
		case part == "" || part == ".":
			return fmt.Errorf("empty or \".\" names are not allowed")
		case len(part) > 255:
			return fmt.Errorf("a name is longer than 255 bytes")
		}
		for _, r := range part {
			if r == unicode.ReplacementChar || unicode.IsControl(r) {
				return fmt.Errorf("names may not hold control or invalid characters")
			}
		}
	}
	return nil
}
