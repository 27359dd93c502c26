package certs

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"time"
)

// Keys of the Secret.
const (
	// KeyCACert and KeyCAKey are the CA that signs the serving certificate.
	KeyCACert = "ca.crt"
	KeyCAKey  = "ca.key"
	// KeyNextCACert and KeyNextCAKey are the CA announced to the apiserver (it is in the bundle)
	// before it signs anything.
	KeyNextCACert = "ca-next.crt"
	KeyNextCAKey  = "ca-next.key"
	// KeyBundle is what the webhook configurations' caBundle holds: the CA, the announced CA and the
	// older CAs until they expire (certificates they signed may still be served).
	KeyBundle = "ca-bundle.crt"
	// KeyCert and KeyKey are the serving certificate, the names kubernetes.io/tls Secrets use.
	KeyCert = "tls.crt"
	KeyKey  = "tls.key"
	// KeyRetired records, for each CA of the bundle that signs no more (neither the CA nor the
	// announced one), until when it stays there: a JSON object from the hex SHA-256 of the
	// certificate to an RFC 3339 time.
	KeyRetired = "ca-retired.json"
)

// When, as fractions of a certificate's lifetime, it is acted on.
const (
	// renewAt: the serving certificate is replaced at 2/3 of its lifetime, so the replicas have the
	// last third to pick up the new one.
	renewAt = 2.0 / 3
	// announceAt: a CA's successor is generated and added to the bundle at half the CA's lifetime...
	announceAt = 1.0 / 2
	// promoteAt: ...and signs the serving certificate from 2/3 on, once the webhook configurations
	// are seen to trust it. The old CA stays in the bundle until it expires, as does every
	// certificate it signed (they are capped at its expiry).
	promoteAt = 2.0 / 3
)

// state is what the Secret holds, parsed; a part that does not parse, or whose key does not match,
// is nil.
type state struct {
	ca, next, serving *pair
	bundle            []*x509.Certificate
	// retired: until when each retired CA of the bundle stays (by fingerprint).
	retired map[string]time.Time
}

func decode(data map[string][]byte) state {
	var s state
	if p, err := parsePair(data[KeyCACert], data[KeyCAKey]); err == nil && p.cert.IsCA {
		s.ca = p
	}
	if p, err := parsePair(data[KeyNextCACert], data[KeyNextCAKey]); err == nil && p.cert.IsCA {
		s.next = p
	}
	if p, err := parsePair(data[KeyCert], data[KeyKey]); err == nil {
		s.serving = p
	}
	s.bundle = parseBundle(data[KeyBundle])
	var retired map[string]time.Time
	if json.Unmarshal(data[KeyRetired], &retired) == nil {
		s.retired = retired
	}
	return s
}

// fingerprint names a certificate in KeyRetired.
func fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

// encode is the Secret's data for s, which plan has completed (ca and serving set).
func (s state) encode() map[string][]byte {
	data := map[string][]byte{
		KeyCACert: s.ca.certPEM, KeyCAKey: s.ca.keyPEM,
		KeyCert: s.serving.certPEM, KeyKey: s.serving.keyPEM,
		KeyBundle: encodeBundle(s.bundle),
	}
	if s.next != nil {
		data[KeyNextCACert], data[KeyNextCAKey] = s.next.certPEM, s.next.keyPEM
	}
	if len(s.retired) > 0 {
		// A map of strings to times always encodes.
		data[KeyRetired], _ = json.Marshal(s.retired)
	}
	return data
}

// at is the moment a fraction f of c's lifetime has passed.
func at(c *x509.Certificate, f float64) time.Time {
	return c.NotBefore.Add(time.Duration(f * float64(c.NotAfter.Sub(c.NotBefore))))
}

// policy is what plan needs from the Config.
type policy struct {
	name                     string
	hosts                    []string // sorted
	caLifetime, certLifetime time.Duration
}

// plan returns the state the Secret should hold at now, why it differs from s (nil: it does not),
// and when the next step falls due. trusted reports whether every webhook configuration's caBundle
// holds a certificate; only a CA they trust may start signing. configured are the certificates the
// configurations' caBundles hold now: a CA among them stays in the bundle while a certificate it
// signed may still be served, so a Secret that comes back empty (deleted and re-created, replaced by a
// sync) never drops the CA of a certificate another replica still serves. Replicas that plan from the
// same Secret at about the same time come to the same steps, so whichever writes first wins and the
// others, reading it back, have nothing left to do.
//
// A CA that signs no more (promoted past, or found only in the bundle or the configurations, as after
// a reset) is retired: it signed every certificate of its before now, and a serving certificate lives
// at most certLifetime, so once certLifetime has passed no live serving certificate chains to it and it
// leaves the bundle (or at its own expiry, if sooner). When it was first found retired is kept in the
// Secret (KeyRetired); a Secret that loses it starts the count again.
func (p policy) plan(s state, now time.Time, trusted func(*x509.Certificate) bool, configured []*x509.Certificate) (state, []string, time.Time, error) {
	var why []string
	usable := func(c *pair) bool { return c != nil && now.Before(c.cert.NotAfter) && !now.Before(c.cert.NotBefore) }
	switch {
	case s.next != nil && usable(s.next) && (!usable(s.ca) || (!now.Before(at(s.ca.cert, promoteAt)) && trusted(s.next.cert))):
		why = append(why, "the announced CA now signs the serving certificate")
		s.ca, s.next, s.serving = s.next, nil, nil
	case !usable(s.ca):
		ca, err := newCA(now, p.caLifetime, p.name)
		if err != nil {
			return s, nil, time.Time{}, err
		}
		why = append(why, "a new CA (none usable)")
		s.ca, s.next, s.serving = ca, nil, nil
	}
	if s.next != nil && !usable(s.next) {
		s.next = nil
	}
	if s.next == nil && !now.Before(at(s.ca.cert, announceAt)) {
		next, err := newCA(now, p.caLifetime, p.name)
		if err != nil {
			return s, nil, time.Time{}, err
		}
		why = append(why, "the next CA announced")
		s.next = next
	}
	if s.serving == nil || !now.Before(at(s.serving.cert, renewAt)) || s.serving.cert.CheckSignatureFrom(s.ca.cert) != nil ||
		!slices.Equal(hostsOf(s.serving.cert), p.hosts) {
		serving, err := newServing(s.ca, now, p.certLifetime, p.hosts)
		if err != nil {
			return s, nil, time.Time{}, err
		}
		why = append(why, "a new serving certificate")
		s.serving = serving
	}

	bundle := []*x509.Certificate{s.ca.cert}
	if s.next != nil {
		bundle = append(bundle, s.next.cert)
	}
	retired := map[string]time.Time{}
	known := slices.Concat(bundle, s.bundle, configured)
	for _, c := range slices.Concat(s.bundle, configured) {
		if !now.Before(c.NotAfter) || !c.IsCA || containsCert(bundle, c) {
			continue
		}
		fp := fingerprint(c)
		// Whole seconds in UTC: what KeyRetired holds reads back equal.
		until := earliest(c.NotAfter, lastSigned(c, known, now).Add(p.certLifetime)).UTC().Truncate(time.Second)
		if recorded, ok := s.retired[fp]; ok {
			until = earliest(until, recorded)
		}
		if !now.Before(until) {
			continue // no live serving certificate chains to it any more
		}
		bundle = append(bundle, c)
		retired[fp] = until
	}
	if !slices.EqualFunc(bundle, s.bundle, func(a, b *x509.Certificate) bool { return a.Equal(b) }) {
		why = append(why, "the trust bundle")
	}
	if !maps.EqualFunc(retired, s.retired, time.Time.Equal) {
		why = append(why, "the retired CAs")
	}
	s.bundle, s.retired = bundle, retired

	due := at(s.serving.cert, renewAt)
	if s.next == nil {
		due = earliest(due, at(s.ca.cert, announceAt))
	} else {
		due = earliest(due, at(s.ca.cert, promoteAt))
	}
	for _, c := range s.bundle {
		due = earliest(due, c.NotAfter)
	}
	for _, until := range s.retired {
		due = earliest(due, until)
	}
	return s, why, due, nil
}

// lastSigned is a time after which the retired CA c signed nothing: now, or earlier when a CA of known
// made before c's half life replaced it. Such a CA cannot be the successor c announces (made at c's
// half life, signing from 2/3), so it was made because c was gone from the Secret (a reset) or
// unusable, and c signed nothing once it was made: at most an hour (backdate) after its NotBefore. It
// does not depend on KeyRetired, so resets that lose the record do not keep c any longer.
func lastSigned(c *x509.Certificate, known []*x509.Certificate, now time.Time) time.Time {
	last := now
	for _, k := range known {
		made := k.NotBefore.Add(time.Hour)
		if k.IsCA && k.NotBefore.After(c.NotBefore) && made.Before(at(c, announceAt)) {
			last = earliest(last, made)
		}
	}
	return last
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
