package certs

import (
	"crypto/x509"
	"slices"
	"testing"
	"time"
)

var (
	t0    = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hosts = []string{"cardinal-webhook.cardinal-system.svc", "cardinal-webhook"}
)

func testPolicy() policy {
	return policy{name: "test", hosts: normalizeHosts(slices.Clone(hosts)), caLifetime: 30 * 24 * time.Hour, certLifetime: 3 * 24 * time.Hour}
}

func trustAll(*x509.Certificate) bool  { return true }
func trustNone(*x509.Certificate) bool { return false }

// mustPlan plans and fails t on error.
func mustPlan(t *testing.T, p policy, s state, now time.Time, trusted func(*x509.Certificate) bool) (state, []string, time.Time) {
	t.Helper()
	out, why, due, err := p.plan(s, now, trusted, nil)
	if err != nil {
		t.Fatalf("plan at %s: %v", now, err)
	}
	// What plan returns survives the Secret: encoded and decoded, it plans to nothing.
	again, whyAgain, _, err := p.plan(decode(out.encode()), now, trusted, nil)
	if err != nil || len(whyAgain) != 0 || !again.serving.cert.Equal(out.serving.cert) {
		t.Fatalf("plan at %s is not stable through the Secret: %v %v", now, whyAgain, err)
	}
	return out, why, due
}

// verifies reports whether c is valid for the Service's name under bundle at now.
func verifies(c *x509.Certificate, bundle []*x509.Certificate, now time.Time) error {
	roots := x509.NewCertPool()
	for _, b := range bundle {
		roots.AddCert(b)
	}
	_, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: hosts[0], CurrentTime: now})
	return err
}

func TestPlanFromNothing(t *testing.T) {
	p := testPolicy()
	s, why, due := mustPlan(t, p, decode(nil), t0, trustNone)
	if !slices.Equal(why, []string{"a new CA (none usable)", "a new serving certificate", "the trust bundle"}) {
		t.Errorf("why = %q", why)
	}
	if err := verifies(s.serving.cert, s.bundle, t0); err != nil {
		t.Errorf("the serving certificate does not verify against the bundle: %v", err)
	}
	if len(s.bundle) != 1 || s.next != nil {
		t.Errorf("bundle of %d, next %v; want the CA alone", len(s.bundle), s.next != nil)
	}
	// 3 days, backdated 1h: 2/3 of 73h after t0-1h is t0+47h40m.
	if want := t0.Add(-time.Hour).Add(73 * time.Hour * 2 / 3); !due.Equal(want) {
		t.Errorf("due %s, want %s (2/3 of the serving certificate's life)", due, want)
	}
}

func TestPlanSteps(t *testing.T) {
	p := testPolicy()
	s, _, _ := mustPlan(t, p, decode(nil), t0, trustNone)
	ca, serving := s.ca.cert, s.serving.cert

	// Before 2/3 of the serving certificate's life: nothing to do.
	if _, why, _ := mustPlan(t, p, s, t0.Add(46*time.Hour), trustAll); len(why) != 0 {
		t.Errorf("at 46h: %q, want nothing", why)
	}
	// At 2/3: a new serving certificate, same CA, same bundle.
	s, why, _ := mustPlan(t, p, s, t0.Add(48*time.Hour), trustAll)
	if !slices.Equal(why, []string{"a new serving certificate"}) || s.serving.cert.Equal(serving) || !s.ca.cert.Equal(ca) {
		t.Errorf("at 48h: %q; want only a new serving certificate under the same CA", why)
	}
	// At half the CA's life (15 days, backdated 1h): the next CA joins the bundle; the CA still signs.
	s, why, _ = mustPlan(t, p, s, t0.Add(15*24*time.Hour), trustAll)
	if !slices.Contains(why, "the next CA announced") || s.next == nil || len(s.bundle) != 2 || !s.bundle[1].Equal(s.next.cert) ||
		!s.ca.cert.Equal(ca) || s.serving.cert.CheckSignatureFrom(ca) != nil {
		t.Fatalf("after half the CA's life (%q): want the next CA announced beside the CA, which still signs", why)
	}
	next := s.next.cert

	// At 2/3 of the CA's life (20 days, backdated 1h), the configurations do not trust the next CA yet:
	// it does not sign.
	at20 := t0.Add(20 * 24 * time.Hour)
	s2, why, _ := mustPlan(t, p, s, at20, trustNone)
	if !s2.ca.cert.Equal(ca) {
		t.Errorf("the next CA was promoted before the configurations trusted it (%q)", why)
	}
	// Once they do, it signs a new serving certificate, and the old CA stays trusted.
	s, why, _ = mustPlan(t, p, s, at20, trustAll)
	if !s.ca.cert.Equal(next) || s.next != nil || s.serving.cert.CheckSignatureFrom(next) != nil {
		t.Fatalf("at 2/3 of the CA's life: %q; want the next CA promoted and signing", why)
	}
	if len(s.bundle) != 2 || !s.bundle[1].Equal(ca) {
		t.Errorf("bundle of %d after promotion; want the new CA and the old one", len(s.bundle))
	}
	// The old CA signed its last serving certificate before its retirement at 20 days; that one lives
	// 3 days at most. The old CA stays until then, and is due to leave then: 23 days, not its own
	// expiry at 30.
	s, _, due := mustPlan(t, p, s, at20.Add(72*time.Hour-time.Minute), trustAll)
	if !containsCert(s.bundle, ca) || !due.Equal(at20.Add(72*time.Hour)) {
		t.Errorf("3 days after its retirement less a minute: the old CA in the bundle %v, due %s; want it there, due at %s",
			containsCert(s.bundle, ca), due, at20.Add(72*time.Hour))
	}
	s, why, _ = mustPlan(t, p, s, at20.Add(72*time.Hour), trustAll)
	if containsCert(s.bundle, ca) || !s.bundle[0].Equal(next) || !slices.Contains(why, "the trust bundle") {
		t.Errorf("3 days after its retirement: bundle of %d (%q); want the old CA gone and the new CA first", len(s.bundle), why)
	}
}

// TestPlanResetsDoNotPileUpCAs: every reset of the Secret (emptied: deleted, helm upgrade --force, a
// GitOps Replace) makes a new CA, and the CA it replaced stays trusted while a serving certificate it
// signed may still be served: a certificate lifetime (3 days here), not the CA's own (30 days). Twenty
// resets an hour apart trust 21 CAs for those 3 days, then only the current one; resets 4 days apart
// never trust more than two. A replica that still serves the previous certificate is trusted while
// that certificate is valid.
func TestPlanResetsDoNotPileUpCAs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		every   time.Duration
		maxCAs  int // the most CAs the bundle holds
		lastCAs int // CAs the bundle holds 3 days after the last reset
	}{
		{"twenty resets an hour apart", time.Hour, 21, 1},
		{"twenty resets 4 days apart", 4 * 24 * time.Hour, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPolicy()
			s, _, _ := mustPlan(t, p, decode(nil), t0, trustNone)
			configured := s.bundle
			trusted := func(c *x509.Certificate) bool { return containsCert(configured, c) }
			most := len(configured)
			now := t0
			for range 20 {
				now = now.Add(tc.every)
				before := s
				var err error
				// The Secret comes back empty: only the configurations remember the CAs.
				s, _, _, err = p.plan(decode(nil), now, trusted, configured)
				if err != nil {
					t.Fatal(err)
				}
				configured = s.bundle
				most = max(most, len(configured))
				if err := verifies(before.serving.cert, configured, now); now.Before(before.serving.cert.NotAfter) && err != nil {
					t.Fatalf("at %s: the certificate a lagging replica serves is not trusted after the reset: %v", now, err)
				}
				// The replicas plan again from the Secret just written: nothing to do.
				if _, why, _, err := p.plan(decode(s.encode()), now, trusted, configured); err != nil || len(why) != 0 {
					t.Fatalf("at %s: a second plan does %q (%v), want nothing", now, why, err)
				}
			}
			if most != tc.maxCAs {
				t.Errorf("the bundle held at most %d CAs, want %d", most, tc.maxCAs)
			}
			s, _, _, err := p.plan(decode(s.encode()), now.Add(72*time.Hour), trusted, configured)
			if err != nil {
				t.Fatal(err)
			}
			if len(s.bundle) != tc.lastCAs || !s.bundle[0].Equal(s.ca.cert) {
				t.Errorf("3 days after the last reset the bundle holds %d CAs, want %d: the current one", len(s.bundle), tc.lastCAs)
			}
		})
	}
}

func TestPlanNewHostsGetANewCertificate(t *testing.T) {
	p := testPolicy()
	s, _, _ := mustPlan(t, p, decode(nil), t0, trustNone)
	p.hosts = normalizeHosts([]string{"127.0.0.1", "cardinal-webhook"})
	s, why, _ := mustPlan(t, p, s, t0.Add(time.Minute), trustAll)
	if !slices.Equal(why, []string{"a new serving certificate"}) || !slices.Equal(hostsOf(s.serving.cert), p.hosts) {
		t.Errorf("why %q, hosts %v; want a new certificate for %v", why, hostsOf(s.serving.cert), p.hosts)
	}
}

func TestPlanBrokenSecretStartsOver(t *testing.T) {
	p := testPolicy()
	s, _, _ := mustPlan(t, p, decode(nil), t0, trustNone)
	data := s.encode()
	data[KeyCAKey] = data[KeyKey] // a key that does not match the CA
	s2, why, _ := mustPlan(t, p, decode(data), t0.Add(time.Minute), trustAll)
	if !slices.Contains(why, "a new CA (none usable)") {
		t.Fatalf("why = %q, want a new CA", why)
	}
	// The old CA stays in the bundle: replicas may still serve what it signed.
	if len(s2.bundle) != 2 || !s2.bundle[1].Equal(s.ca.cert) {
		t.Errorf("bundle of %d; want the new CA and the unexpired old one", len(s2.bundle))
	}
}

// TestPlanEmptiedSecretKeepsConfiguredCAs: the Secret comes back empty (deleted and re-created, helm
// upgrade --force, a GitOps Replace) while another replica still serves a certificate of the old CA.
// The new bundle holds the new CA and every unexpired CA the configurations trust (each may have
// signed a certificate still served), so that replica stays trusted until it reads the new Secret;
// an expired CA, and a certificate that is not a CA, are dropped.
func TestPlanEmptiedSecretKeepsConfiguredCAs(t *testing.T) {
	p := testPolicy()
	old, _, _ := mustPlan(t, p, decode(nil), t0, trustNone)
	other := testPolicy()
	other.caLifetime, other.certLifetime = 12*time.Hour, 6*time.Hour // expired by the time of the emptied Secret
	gone, _, _ := mustPlan(t, other, decode(nil), t0, trustNone)
	now := t0.Add(24 * time.Hour) // the old serving certificate (3 days) is still served
	configured := []*x509.Certificate{old.ca.cert, gone.ca.cert, old.serving.cert}

	s, why, _, err := p.plan(decode(nil), now, trustAll, configured)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(why, "a new CA (none usable)") || s.ca.cert.Equal(old.ca.cert) {
		t.Fatalf("why = %q; want a new CA", why)
	}
	if len(s.bundle) != 2 || !s.bundle[0].Equal(s.ca.cert) || !s.bundle[1].Equal(old.ca.cert) {
		t.Errorf("bundle of %d; want the new CA, then the configured unexpired old CA", len(s.bundle))
	}
	if err := verifies(old.serving.cert, s.bundle, now); err != nil {
		t.Errorf("the other replica's certificate is not trusted by the new bundle: %v", err)
	}
	if containsCert(s.bundle, gone.ca.cert) || containsCert(s.bundle, old.serving.cert) {
		t.Error("the bundle keeps an expired CA or a certificate that is not a CA")
	}
	// Stable: planning again from what was written, with the configurations holding it, does nothing.
	if _, why, _, err := p.plan(decode(s.encode()), now, trustAll, s.bundle); err != nil || len(why) != 0 {
		t.Errorf("a second plan does %q (%v), want nothing", why, err)
	}
}

// TestPlanYearNeverDistrusts runs a year of rotations in 3-hour steps, the way the webhook
// runs them: a replica reconciles, injects the bundle, and another replica may still serve the
// certificate of the previous round. At every step what either serves verifies against what the
// configurations trust.
func TestPlanYearNeverDistrusts(t *testing.T) {
	p := testPolicy()
	s, _, _ := mustPlan(t, p, decode(nil), t0, trustNone)
	configured := s.bundle
	trusted := func(c *x509.Certificate) bool { return containsCert(configured, c) }
	cas, servings := 1, 1
	for now := t0; now.Before(t0.AddDate(1, 0, 0)); now = now.Add(3 * time.Hour) {
		before := s
		var why []string
		var err error
		s, why, _, err = p.plan(s, now, trusted, configured)
		if err != nil {
			t.Fatal(err)
		}
		if !s.ca.cert.Equal(before.ca.cert) {
			cas++
		}
		if !s.serving.cert.Equal(before.serving.cert) {
			servings++
		}
		// The Secret is written first, then the bundle injected; between the two the configurations
		// still hold the previous bundle, and a replica that read the new Secret serves the new
		// certificate.
		if err := verifies(s.serving.cert, configured, now); err != nil {
			t.Fatalf("at %s (%q): the new certificate is not trusted by the configured bundle: %v", now, why, err)
		}
		configured = s.bundle
		if err := verifies(before.serving.cert, configured, now); err != nil {
			t.Fatalf("at %s (%q): the previous certificate, still served by a lagging replica, is not trusted: %v", now, why, err)
		}
	}
	// A CA is made at half its predecessor's life and signs from its predecessor's 2/3 until its own
	// 2/3: a new one every 15 days from day 20: 24 in a year, the first included. A serving certificate lasts 2 days (2/3 of 3, in
	// 3-hour steps: 2d3h), and a promotion renews it early: about 365/2.125 + 24 ≈ 195.
	if cas != 24 || servings < 180 || servings > 210 {
		t.Errorf("%d CAs and %d serving certificates in a year; want 24 and about 195", cas, servings)
	}
}
