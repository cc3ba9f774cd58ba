package sandbox

import (
	"bufio"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// imagePackages is the image's package list, shared with the Dockerfile.
//
//go:embed image/packages.txt
var imagePackages string

// Packages returns the Debian packages the sandbox image is made of.
func Packages() []string {
	var out []string
	for _, l := range strings.Split(imagePackages, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// ImageSuite is the Debian release the image is made from.
const ImageSuite = "trixie"

// Image labels set at build time.
const (
	LabelImageVersion = "pybox.image.version"
	LabelImageSuite   = "pybox.image.suite"
)

// sandboxUID is the uid and gid of the image's unprivileged user.
const sandboxUID = 10001

// BuildOptions configures [BuildImage]. The zero value builds [DefaultImage]
// from the machine's own Debian mirror.
type BuildOptions struct {
	// Ref is the image's name and tag; "" means [DefaultImage].
	Ref string
	// Mirror is the Debian mirror; "" means the one the machine's apt
	// sources name.
	Mirror string
	// RootFS, when set, imports this already bootstrapped root instead of
	// making one.
	RootFS string
	// Keep leaves the bootstrapped root on disk and says where.
	Keep bool
	// Progress receives the build's progress lines; nil discards them.
	Progress io.Writer
}

// BuildImage makes the sandbox image from Debian packages: a minimal root
// made by debootstrap, then imported through the engine's API. It needs
// root and debootstrap on the machine that runs it, not on the engine's.
func (s *Sandbox) BuildImage(ctx context.Context, opt BuildOptions) error {
	if opt.Ref == "" {
		opt.Ref = DefaultImage
	}
	progress := opt.Progress
	if progress == nil {
		progress = io.Discard
	}
	say := func(format string, a ...any) { fmt.Fprintf(progress, "pybox image build: "+format+"\n", a...) }

	if s.imp == nil {
		return errors.New("the image is built on a Docker engine (pybox image build without --backend kubernetes), then loaded into the cluster's nodes or pushed to its registry (deploy/kubernetes/README.md)")
	}
	if _, err := s.imp.Ping(ctx); err != nil {
		return fmt.Errorf("the Docker engine at %s does not answer: %w", s.imp.Host(), err)
	}
	root := opt.RootFS
	if root == "" {
		if os.Geteuid() != 0 {
			return errors.New("building the image bootstraps a Debian root, which needs root: run `sudo pybox image build`, or `docker build -t " + opt.Ref + " sandbox/image` where images can be pulled")
		}
		if _, err := exec.LookPath("debootstrap"); err != nil {
			return errors.New("debootstrap is not installed: `apt-get install debootstrap`, then run this again")
		}
		mirror := opt.Mirror
		if mirror == "" {
			m, err := AptMirror("/etc/apt")
			if err != nil {
				return err
			}
			mirror = m
		}
		dir, err := os.MkdirTemp("/var/tmp", "pybox-rootfs-")
		if err != nil {
			return err
		}
		root = filepath.Join(dir, "root")
		if opt.Keep {
			say("the root stays at %s", root)
		} else {
			defer os.RemoveAll(dir)
		}
		say("bootstrapping Debian %s from %s with %d packages (about 2 minutes)", ImageSuite, mirror, len(Packages()))
		start := time.Now()
		cmd := exec.CommandContext(ctx, "debootstrap", "--variant=minbase",
			"--include="+strings.Join(Packages(), ","), ImageSuite, root, mirror)
		cmd.Stdout, cmd.Stderr = progress, progress
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("debootstrap failed: %w (its output is above)", err)
		}
		say("bootstrapped in %s", time.Since(start).Round(time.Second))
		if err := finishRoot(ctx, root); err != nil {
			return err
		}
	}

	say("importing %s into the engine at %s", opt.Ref, s.imp.Host())
	start := time.Now()
	tar := exec.CommandContext(ctx, "tar", "-C", root, "--numeric-owner", "-c",
		"--exclude=./proc/*", "--exclude=./sys/*", "--exclude=./dev/*",
		"--exclude=./var/cache/apt/archives/*.deb", "--exclude=./var/lib/apt/lists/*",
		"--exclude=./debootstrap", ".")
	out, err := tar.StdoutPipe()
	if err != nil {
		return err
	}
	var tarErr strings.Builder
	tar.Stderr = &tarErr
	if err := tar.Start(); err != nil {
		return fmt.Errorf("tar: %w", err)
	}
	changes := []string{
		"ENV PATH=/usr/local/bin:/usr/bin:/bin",
		"ENV LANG=C.UTF-8",
		fmt.Sprintf("USER %d:%d", sandboxUID, sandboxUID),
		"WORKDIR " + workDir,
		`CMD ["python3"]`,
		fmt.Sprintf("LABEL %s=%s", LabelImageVersion, ImageVersion),
		fmt.Sprintf("LABEL %s=%s", LabelImageSuite, ImageSuite),
	}
	ierr := s.imp.ImageImport(ctx, out, opt.Ref, changes)
	if ierr != nil {
		_ = tar.Process.Kill()
	}
	terr := tar.Wait()
	if ierr != nil {
		return fmt.Errorf("import: %w", ierr)
	}
	if terr != nil {
		return fmt.Errorf("tar: %w: %s", terr, tarErr.String())
	}
	say("imported in %s", time.Since(start).Round(time.Second))
	return nil
}

// finishRoot prepares a bootstrapped root for the sandbox: the unprivileged
// user, the mount points, and a record of the package versions.
func finishRoot(ctx context.Context, root string) error {
	appendLine := func(name, line string) error {
		f, err := os.OpenFile(filepath.Join(root, name), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = fmt.Fprintln(f, line)
		return err
	}
	if err := appendLine("etc/passwd", fmt.Sprintf("sandbox:x:%d:%d:pybox sandbox:/tmp:/usr/sbin/nologin", sandboxUID, sandboxUID)); err != nil {
		return err
	}
	if err := appendLine("etc/group", fmt.Sprintf("sandbox:x:%d:", sandboxUID)); err != nil {
		return err
	}
	// The mount points of the input and output tmpfs mounts: engines keep
	// an image directory's mode over a tmpfs mode option, and the runner,
	// not root, writes there, so they are open to every uid, sticky.
	for _, d := range []string{"mnt/user-data", "mnt/outputs", "opt/pybox"} {
		mode := os.FileMode(0o755)
		if d != "opt/pybox" {
			mode = 0o1777
		}
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
		if err := os.Chmod(filepath.Join(root, d), mode); err != nil {
			return err
		}
	}
	q := exec.CommandContext(ctx, "chroot", root, "dpkg-query", "-W", "-f", "${Package} ${Version}\n")
	list, err := q.Output()
	if err != nil {
		return fmt.Errorf("listing the image's packages: %w", err)
	}
	info := fmt.Sprintf("version=%s\nsuite=%s\nbuilt=%s\n", ImageVersion, ImageSuite, time.Now().UTC().Format(time.RFC3339))
	if err := os.WriteFile(filepath.Join(root, "opt/pybox/image-info"), []byte(info), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, "opt/pybox/packages"), list, 0o644)
}

// AptMirror returns the Debian mirror named by the apt sources under dir
// (normally /etc/apt): the first source of Debian's main archive, in the
// one-line or the deb822 format. Security and third-party sources are
// skipped.
func AptMirror(dir string) (string, error) {
	var files []string
	if _, err := os.Stat(filepath.Join(dir, "sources.list")); err == nil {
		files = append(files, filepath.Join(dir, "sources.list"))
	}
	more, _ := filepath.Glob(filepath.Join(dir, "sources.list.d", "*"))
	files = append(files, more...)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var m string
		switch {
		case strings.HasSuffix(f, ".sources"):
			m = mirrorFromDeb822(string(b))
		case strings.HasSuffix(f, ".list"), filepath.Base(f) == "sources.list":
			m = mirrorFromOneLine(string(b))
		}
		if m != "" {
			return m, nil
		}
	}
	return "", fmt.Errorf("no Debian mirror found in %s/sources.list{,.d}; pass one with --mirror", dir)
}

func isDebianArchive(uri string, suites []string) bool {
	if !strings.Contains(uri, "/debian") || strings.Contains(uri, "security") || strings.Contains(uri, "debian-ports") {
		return false
	}
	for _, s := range suites {
		if !strings.Contains(s, "security") && !strings.Contains(s, "backports") {
			return true
		}
	}
	return false
}

func mirrorFromOneLine(text string) string {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		i := 1
		if strings.HasPrefix(f[i], "[") { // options: [arch=amd64 signed-by=...]
			for i < len(f) && !strings.HasSuffix(f[i], "]") {
				i++
			}
			i++
		}
		if i+1 >= len(f) {
			continue
		}
		if isDebianArchive(f[i], []string{f[i+1]}) {
			return f[i]
		}
	}
	return ""
}

func mirrorFromDeb822(text string) string {
	for _, stanza := range strings.Split(text, "\n\n") {
		fields := map[string]string{}
		for _, l := range strings.Split(stanza, "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), "#") {
				continue
			}
			k, v, ok := strings.Cut(l, ":")
			if !ok || strings.HasPrefix(l, " ") {
				continue
			}
			fields[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
		if t := fields["types"]; !strings.Contains(" "+t+" ", " deb ") {
			continue
		}
		if strings.EqualFold(fields["enabled"], "no") {
			continue
		}
		suites := strings.Fields(fields["suites"])
		for _, uri := range strings.Fields(fields["uris"]) {
			if isDebianArchive(uri, suites) {
				return uri
			}
		}
	}
	return ""
}
