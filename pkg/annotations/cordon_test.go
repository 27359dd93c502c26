package annotations

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const cordonUUID = "GPU-03f69c50-207a-2038-9b45-23cac89cb67d"

func TestCordonRoundTripsInTheCanonicalForm(t *testing.T) {
	c := Cordon{Reason: `correctable ECC errors, "reseat" <today>`, By: "alice@example.com"}
	v, err := EncodeCordon(c)
	if err != nil {
		t.Fatal(err)
	}
	// Compact, reason then by, no HTML escaping: the admission policy matches this form.
	if want := `{"reason":"correctable ECC errors, \"reseat\" <today>","by":"alice@example.com"}`; v != want {
		t.Errorf("EncodeCordon = %s, want %s", v, want)
	}
	uuid, got, err := DecodeCordon(CordonKey(cordonUUID), v)
	if err != nil || uuid != cordonUUID {
		t.Fatalf("DecodeCordon = %q, %v", uuid, err)
	}
	if diff := cmp.Diff(c, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestDecodeCordonNamesTheKeyAndField(t *testing.T) {
	key := CordonKey(cordonUUID)
	for _, c := range []struct{ key, value, want string }{
		{"cardinal.io/gpu-inventory", `{}`, "not a cordon key"},
		{CordonKey("card-1"), `{"reason":"x","by":"a"}`, `"card-1" is no card or MIG instance UUID`},
		{key, `{"reason":"x"`, "is not {\"reason\":…,\"by\":…}"},
		{key, `{"reason":"x","by":"a","extra":1}`, `unknown field "extra"`},
		{key, `{"reason":"x","by":"a"} {}`, "more after the object"},
		{key, `{"reason":" ","by":"a"}`, "reason is empty"},
		{key, `{"reason":"` + strings.Repeat("x", MaxCordonReason+1) + `","by":"a"}`, "reason is 257 characters"},
		{key, `{"reason":"bad\u001b[2J","by":"a"}`, "holds a control character"},
		{key, `{"reason":"x","by":""}`, "by is empty"},
	} {
		_, _, err := DecodeCordon(c.key, c.value)
		if err == nil || !strings.Contains(err.Error(), c.want) || (c.key == key && !strings.Contains(err.Error(), key)) {
			t.Errorf("DecodeCordon(%s, %s) = %v, want an error naming the key and containing %q", c.key, c.value, err, c.want)
		}
	}
}

func TestCordonsOfANode(t *testing.T) {
	good, _ := EncodeCordon(Cordon{Reason: "firmware", By: "ops"})
	mig := "MIG-11111111-2222-3333-4444-555555555555"
	cs := CordonsOf(map[string]string{
		CordonKey(cordonUUID): good,
		CordonKey(mig):        "nonsense",
		GPUInventory:          "{}",
	})
	if got := cs.Why(cordonUUID); got != "firmware (by ops)" {
		t.Errorf("Why(card) = %q", got)
	}
	if got := cs.Why(mig); !strings.HasPrefix(got, "its cordon mark is unreadable: "+CordonKey(mig)) {
		t.Errorf("Why(malformed) = %q, want the device kept out with the error", got)
	}
	if cs.Why("GPU-other") != "" || cs.Empty() {
		t.Errorf("an uncordoned card is cordoned, or the set is empty: %+v", cs)
	}
}

func FuzzDecodeCordon(f *testing.F) {
	good, _ := EncodeCordon(Cordon{Reason: "firmware", By: "ops"})
	f.Add(CordonKey(cordonUUID), good)
	f.Add(CordonKey(cordonUUID), `{"reason":"\u0000","by":"x"}`)
	f.Add("cordon.cardinal.io/MIG-x", `{}`)
	f.Fuzz(func(t *testing.T, key, value string) {
		uuid, c, err := DecodeCordon(key, value)
		if err != nil {
			return
		}
		// What decodes is printable and re-encodes to a value that decodes to the same mark.
		if !printable(c.Reason) || !printable(c.By) {
			t.Fatalf("decoded a mark with control characters: %+v", c)
		}
		v, err := EncodeCordon(c)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", c, err)
		}
		uuid2, c2, err := DecodeCordon(CordonKey(uuid), v)
		if err != nil || uuid2 != uuid || c2 != c {
			t.Fatalf("round trip of %+v: %q %+v %v", c, uuid2, c2, err)
		}
	})
}
