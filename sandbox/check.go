package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Ping reports whether the engine answers, and its API version.
func (s *Sandbox) Ping(ctx context.Context) (string, error) {
	pctx, cancel := withEngineTimeout(ctx)
	defer cancel()
	v, err := s.probe.Ping(pctx)
	if err != nil {
		return "", fmt.Errorf("the %s at %s does not answer: %w", s.EngineKind(), s.probe.Host(), err)
	}
	return v, nil
}

// EngineKind names what runs the sandboxes: "Docker engine" (Podman's
// compatible API included) or "Kubernetes cluster".
func (s *Sandbox) EngineKind() string {
	if s.opt.Kubernetes != nil {
		return "Kubernetes cluster"
	}
	return "Docker engine"
}

// EngineInfo reports the engine's version, runtimes and cgroup setup.
func (s *Sandbox) EngineInfo(ctx context.Context) (EngineInfo, error) {
	ictx, cancel := withEngineTimeout(ctx)
	defer cancel()
	return s.probe.ServerInfo(ictx)
}

// ImageStatus is what is known about the sandbox image on the engine.
type ImageStatus struct {
	Ref     string
	Present bool
	ID      string
	Size    int64
	// Version is the image's pybox.image.version label.
	Version string
	// Current is true when Version is the one this binary expects.
	Current bool
	// Unverified: the engine does not say the image's version (a cluster),
	// so Current is not known.
	Unverified bool
}

// ImageStatus reports whether the sandbox image is present and current.
func (s *Sandbox) ImageStatus(ctx context.Context) (ImageStatus, error) {
	ictx, cancel := withEngineTimeout(ctx)
	defer cancel()
	st := ImageStatus{Ref: s.opt.Image}
	info, err := s.probe.ImageInspect(ictx, s.opt.Image)
	if errors.Is(err, errImageMissing) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	st.Present, st.ID, st.Size = true, info.ID, info.Size
	st.Version = info.Labels[LabelImageVersion]
	st.Current = st.Version == ImageVersion
	st.Unverified = info.NoLabels
	return st, nil
}

// ImageContents lists what the image holds, found by running code in it.
type ImageContents struct {
	Python   string            `json:"python"`
	Modules  map[string]string `json:"modules"`
	Missing  []string          `json:"missing,omitempty"`
	Packages int               `json:"debian_packages"`
}

// contentsProbe prints the image's Python and module versions as JSON.
const contentsProbe = `
import importlib, json, sys
mods = {"numpy": "numpy", "pandas": "pandas", "matplotlib": "matplotlib", "scipy": "scipy",
        "scikit-learn": "sklearn", "seaborn": "seaborn", "statsmodels": "statsmodels",
        "sympy": "sympy", "pillow": "PIL", "openpyxl": "openpyxl",
        "beautifulsoup4": "bs4", "requests": "requests"}
found, missing = {}, []
for name, mod in mods.items():
    try:
        found[name] = getattr(importlib.import_module(mod), "__version__", "?")
    except Exception:
        missing.append(name)
try:
    n = sum(1 for l in open("/opt/pybox/packages") if l.strip())
except OSError:
    n = 0
print(json.dumps({"python": sys.version.split()[0], "modules": found, "missing": missing, "debian_packages": n}))
`

// ImageContents runs a probe in a sandbox to list the image's contents.
func (s *Sandbox) ImageContents(ctx context.Context) (ImageContents, Result, error) {
	res := s.Run(ctx, Request{Code: contentsProbe, Timeout: 60e9})
	var c ImageContents
	if res.Error != ErrNone || res.ExitCode != 0 {
		return c, res, fmt.Errorf("the probe did not run: %s %s", res.Error, strings.TrimSpace(res.Stderr))
	}
	if err := json.Unmarshal([]byte(res.Stdout), &c); err != nil {
		return c, res, fmt.Errorf("the probe's answer: %w", err)
	}
	return c, res, nil
}
