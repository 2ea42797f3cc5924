package etcd_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

func TestParseURL(t *testing.T) {
	cfg, err := etcd.ParseURL("etcd://u:s3cret@h1:2379,h2:2379/app/locks?cacert=/ca&cert=/c&key=/k")
	if err != nil {
		t.Fatal(err)
	}
	want := etcd.Config{Endpoints: []string{"h1:2379", "h2:2379"}, Prefix: "app/locks", Username: "u", Password: "s3cret",
		CAFile: "/ca", CertFile: "/c", KeyFile: "/k"}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("ParseURL = %+v, want %+v", cfg, want)
	}
	for _, bad := range []string{
		"redis://u:s3cret@h:1/p", "etcd://u:s3cret@/p", "etcd://u:s3cret@h1,,h2/p", "etcd://u:s3cret@h:1/p?bogus=1", "etcd://u:s3cret@h:1/p\x7f",
	} {
		_, err := etcd.ParseURL(bad)
		if !errors.Is(err, backend.ErrInvalid) {
			t.Errorf("ParseURL(%q) = %v, want ErrInvalid", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ParseURL(%q) error shows the password: %v", bad, err)
		}
	}
}

// writeCerts writes a CA and a certificate for 127.0.0.1 signed by it
// (used as both server and client certificate) into dir.
func writeCerts(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "leasehold test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kDER, _ := x509.MarshalECPrivateKey(k)
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("cert.pem", "CERTIFICATE", der), write("key.pem", "EC PRIVATE KEY", kDER)
}

// TestTLSAndAuth opens the backend with the URL form over TLS with a client
// certificate, turns on etcd's authentication, and checks that a user and
// password in the URL are used — and never shown in an error.
func TestTLSAndAuth(t *testing.T) {
	ca, cert, key := writeCerts(t, t.TempDir())
	srv := testserver.EtcdTLS(t, ca, cert, key)
	q := url.Values{"cacert": {ca}, "cert": {cert}, "key": {key}}.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		b   *etcd.Backend
		err error
	)
	if !eventually.Within(30*time.Second, func() bool {
		b, err = etcd.Open(ctx, "etcd://"+srv.Addr()+"/tls?"+q)
		return err == nil
	}) {
		t.Fatalf("Open over TLS: %v", err)
	}
	defer b.Close()
	c := b.Client()
	if _, err := c.UserAdd(ctx, "root", "s3cret-pw"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := etcd.Open(ctx, "etcd://root:s3cret-pw@"+srv.Addr()+"/tls?"+q)
	if err != nil {
		t.Fatalf("Open with user and password: %v", err)
	}
	defer a.Close()
	o := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	g, err := a.Acquire(ctx, "k", o, 5*time.Second)
	if err != nil {
		t.Fatalf("Acquire with auth: %v", err)
	}
	if err := a.Release(ctx, "k", o, g.Token); err != nil {
		t.Fatal(err)
	}
	_, err = etcd.Open(ctx, "etcd://root:wr0ng-pw@"+srv.Addr()+"/tls?"+q)
	if err == nil {
		t.Fatal("Open with a wrong password succeeded")
	}
	if strings.Contains(err.Error(), "wr0ng-pw") {
		t.Fatalf("error shows the password: %v", err)
	}
	t.Logf("wrong password: %v", err)
}
