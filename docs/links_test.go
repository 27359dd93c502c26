package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// root is the repository, seen from this package's folder.
const root = ".."

// pages lists the Markdown files whose links are checked, relative to root.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md", "charts/cardinal/README.md"}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, filepath.ToSlash(rel))
	}
	return out
}

var (
	fence    = regexp.MustCompile("(?m)^\\s*```")
	codeSpan = regexp.MustCompile("`[^`\n]*`")
	link     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading  = regexp.MustCompile(`^(#{1,6}) +(.+?) *#*$`)
)

// prose returns the lines of a Markdown file outside fenced code blocks, with their numbers.
func prose(text string) map[int]string {
	out := map[int]string{}
	in := false
	for i, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			in = !in
			continue
		}
		if !in {
			out[i+1] = line
		}
	}
	return out
}

// slug is the anchor GitHub gives a heading: lower case, spaces to '-', every character but
// letters, digits, '-' and '_' dropped (backticks and other punctuation included).
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// anchors returns every heading anchor of a Markdown text; a repeated heading gets "-1", "-2"…
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	lines := prose(text)
	for n := 1; n <= len(strings.Split(text, "\n")); n++ {
		m := heading.FindStringSubmatch(lines[n])
		if m == nil {
			continue
		}
		s := slug(m[2])
		if k := seen[s]; k > 0 {
			out[fmt.Sprintf("%s-%d", s, k)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// brokenLinks returns a line per relative link of page (a path relative to root) that does not
// resolve: a file or folder that is missing, an anchor no heading of the target has, or a path that
// leaves the repository.
func brokenLinks(t *testing.T, page string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		t.Fatal(err)
	}
	var broken []string
	lines := prose(string(raw))
	for n := 1; n <= len(strings.Split(string(raw), "\n")); n++ {
		line, ok := lines[n]
		if !ok {
			continue
		}
		for _, m := range link.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, "``"), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if err := resolve(page, target); err != nil {
				broken = append(broken, fmt.Sprintf("%s:%d: %s: %v", page, n, target, err))
			}
		}
	}
	return broken
}

// resolve checks one relative link target of page.
func resolve(page, target string) error {
	path, anchor, _ := strings.Cut(target, "#")
	file := page
	if path != "" {
		file = filepath.ToSlash(filepath.Join(filepath.Dir(page), path))
		if file == ".." || strings.HasPrefix(file, "../") {
			return fmt.Errorf("leaves the repository")
		}
		if _, err := os.Stat(filepath.Join(root, file)); err != nil {
			return fmt.Errorf("no such file or folder %s", file)
		}
	}
	if anchor == "" {
		return nil
	}
	if !strings.HasSuffix(file, ".md") {
		return fmt.Errorf("an anchor into %s, which is not Markdown", file)
	}
	raw, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return err
	}
	if !anchors(string(raw))[anchor] {
		return fmt.Errorf("%s has no heading #%s", file, anchor)
	}
	return nil
}

func TestLinksResolve(t *testing.T) {
	for _, p := range pages(t) {
		for _, b := range brokenLinks(t, p) {
			t.Error(b)
		}
	}
}

// TestREADMELinksEveryGuide: a page in docs/ that README.md does not link is a page nobody finds.
func TestREADMELinksEveryGuide(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var linked []string
	for _, m := range link.FindAllStringSubmatch(string(raw), -1) {
		path, _, _ := strings.Cut(m[1], "#")
		linked = append(linked, path)
	}
	for _, p := range pages(t) {
		if strings.HasPrefix(p, "docs/") && !slices.Contains(linked, p) {
			t.Errorf("README.md links no %s", p)
		}
	}
}

func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"Install on a cluster":                         "install-on-a-cluster",
		"Supported Kubernetes and Helm versions":       "supported-kubernetes-and-helm-versions",
		"Try it: `make demo`":                          "try-it-make-demo",
		"Mode `hami-core`":                             "mode-hami-core",
		"The kubelet's TopologyManager":                "the-kubelets-topologymanager",
		"Isolation: which cards a container can reach": "isolation-which-cards-a-container-can-reach",
		"The contract (v1)":                            "the-contract-v1",
		"What each mode holds, per threat":             "what-each-mode-holds-per-threat",
		"snake_case and 1.2":                           "snake_case-and-12",
	} {
		if got := slug(h); got != want {
			t.Errorf("slug(%q) = %q, want %q", h, got, want)
		}
	}
}

// TestBrokenLinkIsFound keeps the checker able to fail: a page with a missing file, a missing
// anchor and a path out of the repository yields three broken links.
func TestBrokenLinkIsFound(t *testing.T) {
	for target, bad := range map[string]bool{
		"install.md#install-on-a-cluster":        false,
		"install.md#no-such-heading":             true,
		"no-such-page.md":                        true,
		"../charts/cardinal/values.yaml":         false,
		"../charts/cardinal/no-such-values.yaml": true,
		"../../outside.md":                       true,
		"#the-contract-v1":                       false,
		"../pkg/annotations":                     false,
		"../go.mod#L1":                           true,
	} {
		err := resolve("docs/contract.md", target)
		if (err != nil) != bad {
			t.Errorf("resolve(docs/contract.md, %s) = %v, want broken: %v", target, err, bad)
		}
	}
}
