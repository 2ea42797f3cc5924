package admin

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
)

// The listener proof. A client that found a token by itself (the admin
// token a daemon generated into a file, or one of the daemon's config)
// must not hand it to whatever listens on the daemon's address: another
// local user may have bound that port first. Before sending the token it
// asks the listener to prove it holds the same token, without either
// side sending it:
//
//	GET /api/v1/proof?token_id=<TokenID(token)>&challenge=<random hex>
//	→ {"proof": hex(HMAC-SHA256(token, "leasehold admin proof v1\n" + challenge + "\n" + listener))}
//
// where listener is the address the connection reached on the server's
// side (its local address). Binding the proof to that address defeats a
// squatter that relays the challenge to the real daemon listening
// elsewhere: the daemon then proves its own address, not the squatter's,
// and the client, which compares with the address it is connected to,
// refuses. See docs/security.md (admin token and squatted port).

// ProofPath is the admin API's path of the listener proof.
const ProofPath = "/api/v1/proof"

// TokenID names a token without revealing it (a truncated SHA-256 of a
// domain-separated form), so a client can say which token's proof it
// wants.
func TokenID(secret string) string {
	sum := sha256.Sum256([]byte("leasehold token id v1\n" + secret))
	return hex.EncodeToString(sum[:8])
}

// Proof is what a server holding secret answers to challenge on a
// connection whose server-side address is listener.
func Proof(secret, challenge, listener string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("leasehold admin proof v1\n" + challenge + "\n" + listener))
	return hex.EncodeToString(m.Sum(nil))
}

// CheckProof reports, in constant time, whether proof is Proof(secret,
// challenge, listener).
func CheckProof(secret, challenge, listener, proof string) bool {
	return hmac.Equal([]byte(Proof(secret, challenge, listener)), []byte(proof))
}

// ProofAnswer is the body of a proof answer.
type ProofAnswer struct {
	Proof string `json:"proof"`
}

// getProof answers the listener proof for the token named token_id. It
// needs no token (it is what a client asks before sending one) and tells
// nothing but an HMAC over a challenge the client chose.
func (s *Server) getProof(w http.ResponseWriter, r *http.Request) {
	id, challenge := r.URL.Query().Get("token_id"), r.URL.Query().Get("challenge")
	if len(challenge) < 32 || len(challenge) > 128 {
		writeError(w, http.StatusBadRequest, "challenge", "challenge must be 32 to 128 characters")
		return
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		writeError(w, http.StatusNotFound, "token_id", "this server cannot prove its listener")
		return
	}
	secret, ok := s.tokens.byID(id)
	if !ok {
		writeError(w, http.StatusNotFound, "token_id", "no token with this id")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, ProofAnswer{Proof: Proof(secret, challenge, local.String())})
}

// VerifyListener asks the admin API at base (scheme://host:port) to prove
// it holds secret, through client, and returns the address of the
// connection the proof came on. It follows no redirect: a redirect is no
// proof. An error wraps ErrListenerNotProven when the listener answered without a
// valid proof; any other error is the connection's.
func VerifyListener(ctx context.Context, client *http.Client, base, secret string) (remote string, err error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("challenge: %w", err)
	}
	challenge := hex.EncodeToString(raw)
	q := url.Values{"token_id": {TokenID(secret)}, "challenge": {challenge}}
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { remote = i.Conn.RemoteAddr().String() }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet,
		strings.TrimSuffix(base, "/")+ProofPath+"?"+q.Encode(), nil)
	if err != nil {
		return "", err
	}
	// No redirect is followed: a squatter answering with one to the real
	// daemon would have the proof checked against the daemon's connection,
	// while the caller goes on talking to the squatter's address.
	noRedirects := *client
	noRedirects.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := noRedirects.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrListenerNotProven, err)
	}
	var ans ProofAnswer
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &ans) != nil || ans.Proof == "" {
		return "", fmt.Errorf("%w: it answered %s without a proof", ErrListenerNotProven, resp.Status)
	}
	if !CheckProof(secret, challenge, remote, ans.Proof) {
		return "", fmt.Errorf("%w: its proof is wrong for %s", ErrListenerNotProven, remote)
	}
	return remote, nil
}
