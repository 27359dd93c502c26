package certs

import (
	"crypto/x509"
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
	return s
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
// configurations' caBundles hold now: every CA among them that has not expired stays in the bundle,
// so a Secret that comes back empty (deleted and re-created, replaced by a sync) never drops the CA
// of a certificate another replica still serves. Replicas that plan from the same Secret at about the
// same time come to the same steps, so whichever writes first wins and the others, reading it back,
// have nothing left to do.
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
	for _, c := range slices.Concat(s.bundle, configured) {
		if now.Before(c.NotAfter) && c.IsCA && !containsCert(bundle, c) {
			bundle = append(bundle, c)
		}
	}
	if !slices.EqualFunc(bundle, s.bundle, func(a, b *x509.Certificate) bool { return a.Equal(b) }) {
		why = append(why, "the trust bundle")
	}
	s.bundle = bundle

	due := at(s.serving.cert, renewAt)
	if s.next == nil {
		due = earliest(due, at(s.ca.cert, announceAt))
	} else {
		due = earliest(due, at(s.ca.cert, promoteAt))
	}
	for _, c := range s.bundle {
		due = earliest(due, c.NotAfter)
	}
	return s, why, due, nil
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
