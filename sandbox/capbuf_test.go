package sandbox

import (
	"strings"
	"testing"
)

func TestCappedBufferKeepsHeadAndTail(t *testing.T) {
	c := NewCappedBuffer(5, 5)
	for i := 0; i < 10; i++ {
		c.Write([]byte("0123456789"))
	}
	if c.Total() != 100 || c.Dropped() != 90 {
		t.Fatalf("total %d dropped %d", c.Total(), c.Dropped())
	}
	s := c.String()
	if !strings.HasPrefix(s, "01234") || !strings.HasSuffix(s, "56789") || !strings.Contains(s, "90 bytes dropped") {
		t.Fatalf("got %q", s)
	}
	small := NewCappedBuffer(5, 5)
	small.Write([]byte("abc"))
	small.Write([]byte("defgh"))
	if small.String() != "abcdefgh" || small.Dropped() != 0 {
		t.Fatalf("short output must be kept whole, got %q", small.String())
	}
}
