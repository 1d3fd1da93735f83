package sandbox

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"strings"
)

// The channel's authentication: a key agreed per runner process with the
// host (Diffie-Hellman over RFC 3526 group 14), a sequence number and an HMAC
// on every line (ParseRunnerChannelKeyed, t1flow_mark.py).

// ChannelKeyEnv names the variable that hands the t1flow_mark plugin the
// host's share of one verification's channel keys (ChannelKey.Env). It is
// public: what keeps a line from being forged is the runner's own secret.
// The name stays clear of the prefixes ToolchainVerifyCmd drops.
const ChannelKeyEnv = "T1VERIFY_CHANNEL_KEY"

// channelP is the prime of RFC 3526's 2048-bit MODP group (group 14, a safe
// prime; generator 2), which the plugin uses too.
var channelP, _ = new(big.Int).SetString("FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A08798E3404DD"+
	"EF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED"+
	"EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF0598DA48361C55D39A69163FA8FD24CF5F"+
	"83655D23DCA3AD961C62F356208552BB9ED529077096966D670C354E4ABC9804F1746C08CA18217C32905E462E36CE3B"+
	"E39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF6955817183995497CEA956AE515D2261898FA0510"+
	"15728E5A8AACAA68FFFFFFFFFFFFFFFF", 16)

// ChannelKey is the host's half of one verification's channel keys. Each
// runner process (a sealed pytest: the t1flow_mark plugin) draws a secret
// of its own, sends its public share in its first line ("hello") and MACs
// every line it writes with the key both sides derive by Diffie-Hellman
// (HMAC-SHA256 of the line and its sequence number): only that process and
// the host know it. A line that claims a runner's source and does not
// authenticate, a sequence number seen twice or missing (a line someone else
// read out of the channel), and a runner's event on a line with no
// authentication are forgeries (RunnerChannel.Evidence).
//
// What it does not stop: code that runs inside a runner process (the
// solution module the tests import) can use the process's own key, as it
// can do anything the runner does; and a process that holds the channel
// can start a source of its own (a whole pytest session of its own tests),
// as the host's share is public. So the channel is kept from every process
// but those test.sh starts: a socket from a non-dumpable relay
// (ToolchainRelay), which /proc cannot open again (docs/verification.md).
type ChannelKey struct {
	priv, pub *big.Int
}

// NewChannelKey draws a fresh key for one verification.
func NewChannelKey() (*ChannelKey, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	priv := new(big.Int).SetBytes(b)
	if priv.Sign() == 0 {
		return nil, errors.New("channel key: zero secret")
	}
	return &ChannelKey{priv: priv, pub: new(big.Int).Exp(big.NewInt(2), priv, channelP)}, nil
}

// Public is the host's share, 512 hex digits.
func (k *ChannelKey) Public() string { return fmt.Sprintf("%0512x", k.pub) }

// Env is the KEY=VALUE that hands the runner Public (ChannelKeyEnv).
func (k *ChannelKey) Env() string { return ChannelKeyEnv + "=" + k.Public() }

// channelShare parses a share (the host's or a runner's) and refuses the
// degenerate ones (0, 1, p-1 and anything out of the group).
func channelShare(s string) (*big.Int, bool) {
	if len(s) != 512 {
		return nil, false
	}
	x, ok := new(big.Int).SetString(s, 16)
	if !ok || x.Cmp(big.NewInt(1)) <= 0 || x.Cmp(new(big.Int).Sub(channelP, big.NewInt(1))) >= 0 {
		return nil, false
	}
	return x, true
}

// channelKeys derives a source's MAC key and its id from the shared secret s
// and the runner's share r.
func channelKeys(s, r *big.Int) (mac []byte, id string) {
	rb := r.FillBytes(make([]byte, 256))
	h := sha256.New()
	h.Write([]byte("t1flow-channel-v1"))
	h.Write(s.FillBytes(make([]byte, 256)))
	h.Write(rb)
	sum := sha256.Sum256(rb)
	return h.Sum(nil), hex.EncodeToString(sum[:8])
}

// source is a runner's share as the host sees it: its MAC key and id.
func (k *ChannelKey) source(share string) (mac []byte, id string, ok bool) {
	r, ok := channelShare(share)
	if !ok {
		return nil, "", false
	}
	mac, id = channelKeys(new(big.Int).Exp(r, k.priv, channelP), r)
	return mac, id, true
}

// channelMAC is what a line's "m" holds: HMAC-SHA256 of everything before
// it, the first 16 bytes, in hex.
func channelMAC(key []byte, body string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(body))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// channelMACSep starts a line's MAC: the line is body + channelMACSep + mac + `"}`.
const channelMACSep = `,"m":"`

// channelSigned splits an authenticated line into what its MAC covers and
// the MAC.
func channelSigned(line string) (body, mac string, ok bool) {
	i := strings.LastIndex(line, channelMACSep)
	if i < 0 || !strings.HasSuffix(line, `"}`) {
		return "", "", false
	}
	mac = line[i+len(channelMACSep) : len(line)-2]
	return line[:i], mac, len(mac) == 32
}

// ChannelSource is a runner's side of the channel, as the t1flow_mark plugin
// writes it (for tests, and for tools that replay a runner).
type ChannelSource struct {
	key []byte
	id  string
	n   int
}

// NewChannelSource draws a runner's secret against the host's share
// (ChannelKey.Public) and returns the source and its hello line.
func NewChannelSource(hostShare string, pid int) (*ChannelSource, string, error) {
	h, ok := channelShare(hostShare)
	if !ok {
		return nil, "", errors.New("channel source: not a host share")
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, "", err
	}
	x := new(big.Int).SetBytes(b)
	r := new(big.Int).Exp(big.NewInt(2), x, channelP)
	mac, id := channelKeys(new(big.Int).Exp(h, x, channelP), r)
	s := &ChannelSource{key: mac, id: id}
	return s, s.Line(fmt.Sprintf(`{"ev":"hello","pid":%d,"dh":"%0512x"}`, pid, r)), nil
}

// Line authenticates one JSON object line ({...}): its source, its sequence
// number and its MAC added.
func (s *ChannelSource) Line(obj string) string {
	body := fmt.Sprintf(`%s,"src":"%s","n":%d`, strings.TrimSuffix(obj, "}"), s.id, s.n)
	s.n++
	return body + channelMACSep + channelMAC(s.key, body) + `"}`
}
