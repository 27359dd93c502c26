package annotations

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"
)

// Cordoned cards (contract v1, additive). An operator takes one card out of service with an
// annotation on its Node, one per card:
//
//	cordon.cardinal.io/<card or MIG instance UUID>: {"reason":"<why>","by":"<who>"}
//
// The extender places nothing new on a cordoned card (pods already on it keep running); the device
// plugin's health logic is not involved. The value is compact JSON with exactly these two fields in
// this order, so that the API server's admission policy (chart: cordon-policy.yaml) can check it
// without parsing JSON: "by" must be the user who writes the mark, and the device plugin may not
// write one at all. `kubectl cardinal cordon|uncordon|drain` write and remove them.

// CordonPrefix is the prefix of a cordon annotation's key; the rest is the card's UUID.
const CordonPrefix = "cordon.cardinal.io/"

// MaxCordonReason bounds a cordon's reason, in characters (runes: what the admission policy counts).
const MaxCordonReason = 256

// Cordon is one cordon mark.
type Cordon struct {
	Reason string `json:"reason"`
	By     string `json:"by"`
}

// uuidName is what a cordon key names: a card (GPU-…) or a MIG instance (MIG-…) by UUID.
var uuidName = regexp.MustCompile(`^(GPU|MIG)-[0-9A-Za-z][-0-9A-Za-z]*$`)

// CordonKey is the annotation key of the cordon of the device with uuid.
func CordonKey(uuid string) string { return CordonPrefix + uuid }

// CordonUUID returns the UUID a cordon key names; ok is false for keys that are no cordon.
func CordonUUID(key string) (uuid string, ok bool) {
	return strings.CutPrefix(key, CordonPrefix)
}

// EncodeCordon writes c in the canonical form (compact, reason then by).
func EncodeCordon(c Cordon) (string, error) {
	if err := c.validate(); err != nil {
		return "", err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(c); err != nil {
		return "", err
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

// DecodeCordon reads the cordon annotation key=value; errors name the key and the field.
func DecodeCordon(key, value string) (uuid string, c Cordon, err error) {
	uuid, ok := CordonUUID(key)
	if !ok {
		return "", c, fmt.Errorf("%s: not a cordon key (want %s<UUID>)", key, CordonPrefix)
	}
	if !uuidName.MatchString(uuid) {
		return "", c, fmt.Errorf("%s: %q is no card or MIG instance UUID (GPU-… or MIG-…)", key, uuid)
	}
	dec := json.NewDecoder(strings.NewReader(value))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return "", Cordon{}, fmt.Errorf("%s: %q is not {\"reason\":…,\"by\":…}: %w", key, value, err)
	}
	if dec.More() {
		return "", Cordon{}, fmt.Errorf("%s: %q: more after the object", key, value)
	}
	if err := c.validate(); err != nil {
		return "", Cordon{}, fmt.Errorf("%s: %w", key, err)
	}
	return uuid, c, nil
}

func (c Cordon) validate() error {
	var errs []error
	switch {
	case strings.TrimSpace(c.Reason) == "":
		errs = append(errs, errors.New("reason is empty: say why the card is out of service"))
	case utf8.RuneCountInString(c.Reason) > MaxCordonReason:
		errs = append(errs, fmt.Errorf("reason is %d characters, more than %d", utf8.RuneCountInString(c.Reason), MaxCordonReason))
	case !printableText(c.Reason):
		errs = append(errs, fmt.Errorf("reason %q holds a control character: printable text only", c.Reason))
	}
	switch {
	case c.By == "":
		errs = append(errs, errors.New("by is empty: the user who cordons the card"))
	case !printableText(c.By) || strings.ContainsAny(c.By, `"\`):
		errs = append(errs, fmt.Errorf("by %q: printable text without quotes or backslashes only", c.By))
	}
	return errors.Join(errs...)
}

// printableText reports whether s is valid UTF-8 without control characters (IsControl).
func printableText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, IsControl)
}

// Cordons are a Node's cordon marks by UUID; Bad lists the marks that do not decode (each error names
// its key): their cards are kept out of service too, since someone meant to cordon them.
type Cordons struct {
	ByUUID map[string]Cordon
	Bad    map[string]error
}

// CordonsOf reads every cordon annotation of a Node.
func CordonsOf(nodeAnnotations map[string]string) Cordons {
	var out Cordons
	keys := make([]string, 0)
	for k := range nodeAnnotations {
		if strings.HasPrefix(k, CordonPrefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		uuid, c, err := DecodeCordon(k, nodeAnnotations[k])
		if err != nil {
			if out.Bad == nil {
				out.Bad = map[string]error{}
			}
			u, _ := CordonUUID(k)
			out.Bad[u] = err
			continue
		}
		if out.ByUUID == nil {
			out.ByUUID = map[string]Cordon{}
		}
		out.ByUUID[uuid] = c
	}
	return out
}

// Why is what a cordoned device's reason says, "" when uuid is not cordoned.
func (cs Cordons) Why(uuid string) string {
	if c, ok := cs.ByUUID[uuid]; ok {
		return c.Reason + " (by " + c.By + ")"
	}
	if err, ok := cs.Bad[uuid]; ok {
		return "its cordon mark is unreadable: " + err.Error()
	}
	return ""
}

// Empty reports whether no device is cordoned.
func (cs Cordons) Empty() bool { return len(cs.ByUUID) == 0 && len(cs.Bad) == 0 }
