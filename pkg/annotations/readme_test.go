package annotations

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The contract's pages are documentation people act on; these tests keep them equal to the code.

// contractPages are the pages that hold the contract, each between contract markers: what a pod's
// author writes (resources, pod annotations), then what other programs read (records, node keys).
var contractPages = []string{"../../docs/using.md", "../../docs/contract.md"}

// contractSection returns the text between the contract markers of every contract page, in order.
func contractSection(t *testing.T) string {
	t.Helper()
	const begin, end = "<!-- contract:begin -->", "<!-- contract:end -->"
	var out strings.Builder
	for _, p := range contractPages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		i, j := strings.Index(s, begin), strings.Index(s, end)
		if i < 0 || j < i {
			t.Fatalf("%s: no %s ... %s section", p, begin, end)
		}
		out.WriteString(s[i+len(begin) : j])
		out.WriteString("\n")
	}
	return out.String()
}

// readmeTables returns, for each table of the section whose header starts with one of headers, the
// back-quoted value of the first cell of every row.
func readmeTables(t *testing.T, section string) map[string][]string {
	t.Helper()
	first := regexp.MustCompile("^\\| `([^`]+)` \\|")
	tables := map[string][]string{}
	current := ""
	for _, line := range strings.Split(section, "\n") {
		switch {
		case !strings.HasPrefix(line, "|"):
			current = ""
		case current == "":
			current = strings.TrimSpace(line)
			if _, dup := tables[current]; dup {
				t.Errorf("two contract tables have the header %s", current)
			}
			tables[current] = []string{}
		case strings.HasPrefix(line, "|---"):
		default:
			m := first.FindStringSubmatch(line)
			if m == nil {
				t.Errorf("contract table %q: row without a `key` in its first cell: %s", current, line)
				continue
			}
			tables[current] = append(tables[current], m[1])
		}
	}
	return tables
}

// slashConstants returns the value of every string constant of the package (test files aside) that
// looks like a resource name or annotation key (domain/name), so a new key cannot be left out of
// the docs.
func slashConstants(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					s, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					if strings.Contains(s, "/") {
						out[s] = vs.Names[i].Name
					}
				}
			}
		}
	}
	return out
}

// jsonFields lists the JSON names of a struct's fields in order, a slice of structs as "name" then
// its fields as "name[].field".
func jsonFields(typ reflect.Type, prefix string) []string {
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		out = append(out, prefix+name)
		if f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct {
			out = append(out, jsonFields(f.Type.Elem(), prefix+name+"[].")...)
		}
	}
	return out
}

func TestReadmeTablesMatchConstants(t *testing.T) {
	tables := readmeTables(t, contractSection(t))
	const kubeletTableHeader = "| field | value | meaning |"
	if diff := cmp.Diff(jsonFields(reflect.TypeOf(KubeletTopology{}), ""), tables[kubeletTableHeader]); diff != "" {
		t.Errorf("docs: kubelet field table (first column, in order) differs from KubeletTopology's JSON fields (-code +docs):\n%s", diff)
	}
	delete(tables, kubeletTableHeader)
	const sharingTableHeader = "| sharing field | value | meaning |"
	if diff := cmp.Diff(jsonFields(reflect.TypeOf(Sharing{}), ""), tables[sharingTableHeader]); diff != "" {
		t.Errorf("docs: sharing field table (first column, in order) differs from Sharing's JSON fields (-code +docs):\n%s", diff)
	}
	delete(tables, sharingTableHeader)
	const migTableHeader = "| mig field | value | meaning |"
	if diff := cmp.Diff(jsonFields(reflect.TypeOf(MIG{}), ""), tables[migTableHeader]); diff != "" {
		t.Errorf("docs: mig field table (first column, in order) differs from MIG's and MIGInstance's JSON fields (-code +docs):\n%s", diff)
	}
	delete(tables, migTableHeader)
	const linksTableHeader = "| links field | value | meaning |"
	if diff := cmp.Diff(jsonFields(reflect.TypeOf(Link{}), ""), tables[linksTableHeader]); diff != "" {
		t.Errorf("docs: links field table (first column, in order) differs from Link's JSON fields (-code +docs):\n%s", diff)
	}
	delete(tables, linksTableHeader)
	const (
		resourceTable = "| resource | flag | value | meaning |"
		podTable      = "| key | value | rule |"
		internalTable = "| key | on | written by | record |"
		operatorTable = "| key prefix | on | value and effect |"
		groupTable    = "| group key | on | value | meaning |"
	)
	var resources []string
	for _, r := range DefaultResourceNames().All() {
		resources = append(resources, string(r))
	}
	resources = append(resources, string(ResourceMIGRoute), string(ResourceHostRoute))
	want := map[string][]string{resourceTable: resources, podTable: UserKeys, internalTable: InternalKeys, operatorTable: {CordonPrefix}, groupTable: GroupKeys}
	if diff := cmp.Diff(want, tables); diff != "" {
		t.Errorf("docs: contract tables (first column, in order) differ from the constants (-code +docs):\n%s", diff)
	}

	// Every key-like constant of the package is in one of the lists above, and so in the docs.
	listed := map[string]bool{}
	for _, keys := range want {
		for _, k := range keys {
			listed[k] = true
		}
	}
	for value, name := range slashConstants(t) {
		if !listed[value] {
			t.Errorf("constant %s = %q is in no docs table (and not in UserKeys, InternalKeys or DefaultResourceNames)", name, value)
		}
	}
}

func TestReadmeNamesEveryPolicyAndFlag(t *testing.T) {
	section := contractSection(t)
	for _, p := range Policies {
		if !strings.Contains(section, "`"+string(p)+"`") {
			t.Errorf("docs: contract does not name policy `%s`", p)
		}
	}
	for _, m := range SharingModes {
		if !strings.Contains(section, "`"+m+"`") {
			t.Errorf("docs: contract does not name sharing mode `%s`", m)
		}
	}
	for _, e := range SharingEnforcements {
		if !strings.Contains(section, "`"+e+"`") {
			t.Errorf("docs: contract does not name sharing enforcement `%s`", e)
		}
	}
	for _, flag := range []string{"--resource-gpu", "--resource-gpumem", "--resource-gpumem-percentage", "--resource-gpucores"} {
		if !strings.Contains(section, "`"+flag+"`") {
			t.Errorf("docs: contract does not name flag `%s`", flag)
		}
	}
	if !strings.Contains(section, "| 0–"+strconv.Itoa(MaxGPUsPerContainer)+" |") {
		t.Errorf("docs: resource table does not give 0–%d for nvidia.com/gpu", MaxGPUsPerContainer)
	}
	if !strings.Contains(section, "at most "+strconv.Itoa(MaxListEntries)+" entries") {
		t.Errorf("docs: contract does not say a list holds at most %d entries", MaxListEntries)
	}
	for _, mode := range []string{MIGEnabled, MIGEnabling} {
		if !strings.Contains(section, "`"+mode+"`") {
			t.Errorf("docs: contract does not name MIG mode `%s`", mode)
		}
	}
	levels := make([]string, len(PCIeLevels))
	for i, l := range PCIeLevels {
		levels[i] = "`" + l + "`"
	}
	if !strings.Contains(section, "| "+strings.Join(levels, ", ")+" (optional) |") {
		t.Errorf("docs: links table does not give the PCIe levels %s in order", strings.Join(levels, ", "))
	}
	if !strings.Contains(section, "| 0–"+strconv.Itoa(MaxNVLinks)+" (optional") {
		t.Errorf("docs: links table does not give 0–%d for nvlinks", MaxNVLinks)
	}
	if !strings.Contains(section, "`"+LinkNVLink+"`") {
		t.Errorf("docs: contract does not name the link requirement `%s`", LinkNVLink)
	}
	if !strings.Contains(section, "at most "+strconv.Itoa(MaxMIGInstances)+" |") {
		t.Errorf("docs: mig table does not give at most %d instances", MaxMIGInstances)
	}
	if !strings.Contains(section, "`"+string(DefaultResourceNames().MIGResource("1g.10gb+me"))+"`") {
		t.Errorf("docs: contract does not show how a profile with + is named (%s)", DefaultResourceNames().MIGResource("1g.10gb+me"))
	}
	if !strings.Contains(section, "| 1–"+strconv.Itoa(MaxGroupPods)+" |") {
		t.Errorf("docs: group table does not give 1–%d for the total count", MaxGroupPods)
	}
	if !strings.Contains(section, "1–"+strconv.Itoa(MaxMemoryMiB)+" (MiB)") {
		t.Errorf("docs: resource table does not give 1–%d (MiB) for nvidia.com/gpumem", MaxMemoryMiB)
	}
}

// The JSON examples are the records the tests use, so they are valid and show the real shape.
func TestReadmeJSONExamples(t *testing.T) {
	section := contractSection(t)
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) != 6 {
		t.Fatalf("docs: contract has %d json blocks, want 6 (inventory, inventory with kubelet, inventory with MIG, inventory with links, assignment, allocation)", len(blocks))
	}
	lraw := blocks[3][1]
	linv, err := DecodeInventory(lraw)
	if err != nil {
		t.Errorf("inventory with links example: %v", err)
	}
	wantLinv := sampleLinksInventory()
	wantLinv.V = Version
	if diff := cmp.Diff(wantLinv, linv); diff != "" {
		t.Errorf("inventory with links example (-want +docs):\n%s", diff)
	}
	lenc, err := EncodeInventory(sampleLinksInventory())
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.NewReplacer("\n", "", "  ", "").Replace(lraw); got != lenc {
		t.Errorf("inventory with links example, without line breaks and indentation:\n%s\nwant (Encode):\n%s", got, lenc)
	}
	blocks = append(blocks[:3:3], blocks[4:]...) // the checks below take inventory, inventory with kubelet, inventory with MIG, assignment, allocation
	mraw := blocks[2][1]
	minv, err := DecodeInventory(mraw)
	if err != nil {
		t.Errorf("inventory with MIG example: %v", err)
	}
	wantMinv := sampleMIGInventory()
	wantMinv.V = Version
	if diff := cmp.Diff(wantMinv, minv); diff != "" {
		t.Errorf("inventory with MIG example (-want +docs):\n%s", diff)
	}
	menc, err := EncodeInventory(sampleMIGInventory())
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.NewReplacer("\n", "", "  ", "").Replace(mraw); got != menc {
		t.Errorf("inventory with MIG example, without line breaks and indentation:\n%s\nwant (Encode):\n%s", got, menc)
	}
	blocks = append(blocks[:2:2], blocks[3:]...) // the checks below take inventory, inventory with kubelet, assignment, allocation
	kraw := blocks[1][1]
	kinv, err := DecodeInventory(kraw)
	if err != nil {
		t.Errorf("inventory with kubelet example: %v", err)
	}
	wantKinv := sampleKubeletInventory()
	wantKinv.V = Version
	if diff := cmp.Diff(wantKinv, kinv); diff != "" {
		t.Errorf("inventory with kubelet example (-want +docs):\n%s", diff)
	}
	blocks = append(blocks[:1:1], blocks[2:]...) // the checks below take inventory, assignment, allocation
	kenc, err := EncodeInventory(sampleKubeletInventory())
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.NewReplacer("\n", "", "  ", "").Replace(kraw); got != kenc {
		t.Errorf("inventory with kubelet example, without line breaks and indentation:\n%s\nwant (Encode):\n%s", got, kenc)
	}
	inv, err := DecodeInventory(blocks[0][1])
	if err != nil {
		t.Errorf("inventory example: %v", err)
	}
	wantInv := sampleInventory()
	wantInv.V = Version
	if diff := cmp.Diff(wantInv, inv); diff != "" {
		t.Errorf("inventory example (-want +docs):\n%s", diff)
	}
	as, err := DecodeAssignment(blocks[1][1])
	if err != nil {
		t.Errorf("assignment example: %v", err)
	}
	wantAs := sampleAssignment()
	wantAs.V = Version
	if diff := cmp.Diff(wantAs, as); diff != "" {
		t.Errorf("assignment example (-want +docs):\n%s", diff)
	}
	al, err := DecodeAllocation(blocks[2][1])
	if err != nil {
		t.Errorf("allocation example: %v", err)
	}
	wantAl := sampleAllocation()
	wantAl.V = Version
	if diff := cmp.Diff(wantAl, al); diff != "" {
		t.Errorf("allocation example (-want +docs):\n%s", diff)
	}
	// Compacted, each example is exactly what Encode writes.
	for i, enc := range []func() (string, error){
		func() (string, error) { return EncodeInventory(sampleInventory()) },
		func() (string, error) { return EncodeAssignment(sampleAssignment()) },
		func() (string, error) { return EncodeAllocation(sampleAllocation()) },
	} {
		want, err := enc()
		if err != nil {
			t.Fatal(err)
		}
		got := strings.NewReplacer("\n", "", "  ", "").Replace(blocks[i][1])
		if got != want {
			t.Errorf("json block %d, without line breaks and indentation:\n%s\nwant (Encode):\n%s", i+1, got, want)
		}
	}
}

func TestReadmeErrorExamplesAreReal(t *testing.T) {
	section := contractSection(t)
	examples := []error{
		func() error { _, err := ParseSelector(map[string]string{UseGPUUUID: "GPU-a,,GPU-b"}); return err }(),
		func() error {
			_, err := ParseSelector(map[string]string{UseGPUUUID: "GPU-a", NoUseGPUUUID: "GPU-a"})
			return err
		}(),
		func() error { _, err := ParseSelector(map[string]string{NodePolicy: "best"}); return err }(),
		func() error {
			_, _, err := DecodePodGroup(map[string]string{PodGroupName: "train-7"}, map[string]string{PodGroupTotalCount: "four"})
			return err
		}(),
		func() error {
			c := ctr("train", res("nvidia.com/gpu", "1", "nvidia.com/gpumem-percentage", "140"), nil)
			_, err := ParseContainerRequest(&c, DefaultResourceNames())
			return err
		}(),
		func() error {
			c := ctr("train", res("nvidia.com/mig-1g.10gb", "1", "nvidia.com/mig-3g.40gb", "1"), nil)
			_, err := ParseContainerRequest(&c, DefaultResourceNames())
			return err
		}(),
		func() error {
			c := ctr("train", res("nvidia.com/gpu", "1", "nvidia.com/mig-1g.10gb", "1"), nil)
			_, err := ParseContainerRequest(&c, DefaultResourceNames())
			return err
		}(),
		func() error {
			c := ctr("train", res("nvidia.com/mig-1g", "1"), nil)
			_, err := ParseContainerRequest(&c, DefaultResourceNames())
			return err
		}(),
	}
	for _, err := range examples {
		if err == nil {
			t.Fatal("example input was accepted")
		}
		if !strings.Contains(section, "`"+err.Error()+"`") {
			t.Errorf("docs: does not show the real message `%s`", err)
		}
	}
}
