package certs

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// pair is a certificate with its private key, parsed and as PEM.
type pair struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	keyPEM  []byte
}

// parsePair decodes a PEM certificate and its PEM private key and checks they belong together.
func parsePair(certPEM, keyPEM []byte) (*pair, error) {
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("key is not PEM")
	}
	var key any
	switch block.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, errors.New("key cannot sign")
	}
	pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, errors.New("key does not match the certificate")
	}
	return &pair{cert: cert, key: signer, certPEM: certPEM, keyPEM: keyPEM}, nil
}

func parseCert(certPEM []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("certificate is not PEM")
	}
	return x509.ParseCertificate(block.Bytes)
}

// parseBundle decodes every certificate of a PEM bundle, skipping what does not parse.
func parseBundle(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return out
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

// encodeBundle is the PEM of certs, in order.
func encodeBundle(certs []*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes()
}

func containsCert(certs []*x509.Certificate, c *x509.Certificate) bool {
	return slices.ContainsFunc(certs, c.Equal)
}

// backdate is how much earlier than now a certificate starts: clocks of the apiservers may lag
// behind this one's. An hour, or a tenth of a short lifetime (tests).
func backdate(lifetime time.Duration) time.Duration { return min(time.Hour, lifetime/10) }

// newCA makes a self-signed CA valid from (about) now for lifetime.
func newCA(now time.Time, lifetime time.Duration, name string) (*pair, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s CA %s", name, now.UTC().Format(time.RFC3339))},
		NotBefore:             now.Add(-backdate(lifetime)),
		NotAfter:              now.Add(lifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	return sign(tmpl, nil)
}

// newServing makes a serving certificate for hosts (DNS names or IP addresses) signed by ca, valid
// from (about) now for lifetime but never past the CA.
func newServing(ca *pair, now time.Time, lifetime time.Duration, hosts []string) (*pair, error) {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: hosts[0]},
		NotBefore:   now.Add(-backdate(lifetime)),
		NotAfter:    now.Add(lifetime),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if tmpl.NotAfter.After(ca.cert.NotAfter) {
		tmpl.NotAfter = ca.cert.NotAfter
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return sign(tmpl, ca)
}

// sign makes a fresh ECDSA P-256 key and the certificate tmpl for it, signed by parent (nil: by
// itself).
func sign(tmpl *x509.Certificate, parent *pair) (*pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating a key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating a serial number: %w", err)
	}
	tmpl.SerialNumber = serial
	issuer, signer := tmpl, crypto.Signer(key)
	if parent != nil {
		issuer, signer = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, key.Public(), signer)
	if err != nil {
		return nil, fmt.Errorf("signing a certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	return parsePair(certPEM, keyPEM)
}

// hostsOf lists the DNS names and IP addresses a certificate is valid for.
func hostsOf(c *x509.Certificate) []string {
	out := slices.Clone(c.DNSNames)
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	slices.Sort(out)
	return out
}
