// Package docs is ticketd's documentation; its test compiles every Go program the pages show, the way a
// service that uses ticketd would build it.
package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// modules are ticketd's modules a consumer may need, by directory from the repository's root.
var modules = map[string]string{
	"github.com/ticketd/ticketd":                  ".",
	"github.com/ticketd/ticketd/client":           "client",
	"github.com/ticketd/ticketd/internal/backoff": "internal/backoff",
	"github.com/ticketd/ticketd/internal/hedge":   "internal/hedge",
}

// maxSDKModules is the most modules a service that imports only the SDK may take on, itself included.
const maxSDKModules = 15

// program is a Go program shown on a page.
type program struct{ page, src string }

func programs(t *testing.T) []program {
	t.Helper()
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{"../README.md"}, pages...)
	var out []program
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
			out = append(out, program{strings.TrimPrefix(p, "../"), m[1]})
		}
	}
	return out
}

// TestGoProgramsCompile: every Go block in README.md and docs/ is a complete program (package main)
// that builds in a module of its own, which requires ticketd's modules as a service would (each
// replaced by its directory here, as it is not fetched). A program that imports only the SDK takes on
// at most maxSDKModules modules, its own included.
func TestGoProgramsCompile(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	progs := programs(t)
	sdkOnly := 0
	for i, p := range progs {
		if !strings.HasPrefix(strings.TrimSpace(p.src), "package main\n") || !strings.Contains(p.src, "\nfunc main() {\n") {
			t.Errorf("%s: Go block %d is not a complete program (package main with a func main):\n%s", p.page, i, p.src)
			continue
		}
		imports := regexp.MustCompile(`"(github\.com/ticketd/ticketd[^"]*)"`).FindAllStringSubmatch(p.src, -1)
		onlySDK := len(imports) > 0
		for _, m := range imports {
			onlySDK = onlySDK && m[1] == "github.com/ticketd/ticketd/client"
		}
		goVersion := "1.26.0" // the server module's
		if onlySDK {
			goVersion = "1.25.0" // the oldest release the SDK supports
			sdkOnly++
		}
		t.Run(strings.ReplaceAll(p.page, "/", "_")+"_"+string(rune('a'+i)), func(t *testing.T) {
			dir := t.TempDir()
			mod := "module example.com/service\n\ngo " + goVersion + "\n"
			for path, sub := range modules {
				mod += "\nreplace " + path + " => " + filepath.Join(root, sub) + "\n"
			}
			if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(p.src), 0o644); err != nil {
				t.Fatal(err)
			}
			goCmd := func(args ...string) string {
				cmd := exec.Command("go", args...)
				cmd.Dir = dir
				cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s: go %s: %v\n%s\n%s", p.page, strings.Join(args, " "), err, out, p.src)
				}
				return string(out)
			}
			goCmd("mod", "tidy")
			goCmd("vet", ".")
			goCmd("build", "-o", filepath.Join(dir, "service"), ".")
			if !onlySDK {
				return
			}
			names := strings.Fields(goCmd("list", "-m", "-f", "{{.Path}}", "all"))
			if len(names) > maxSDKModules || len(names) < 2 {
				t.Fatalf("%s: a service that imports only the SDK takes on %d modules, want 2 to %d: %v", p.page, len(names), maxSDKModules, names)
			}
			t.Logf("%s: %d modules: %v", p.page, len(names), names)
		})
	}
	if sdkOnly == 0 {
		t.Fatal("no page shows a program that uses the SDK alone")
	}
}
