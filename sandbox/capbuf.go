package sandbox

import "fmt"

// CappedBuffer keeps the first and last bytes of a stream and counts what it
// drops in between: the start of a command's output says what it did, the end
// says how it finished, and the middle of a 50 MB log helps no one.
type CappedBuffer struct {
	headCap, tailCap int
	head             []byte
	tail             []byte // ring buffer once full
	tailStart        int
	total            int64
}

// NewCappedBuffer keeps at most head+tail bytes.
func NewCappedBuffer(head, tail int) *CappedBuffer {
	return &CappedBuffer{headCap: head, tailCap: tail}
}

func (c *CappedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	c.total += int64(n)
	if room := c.headCap - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	if c.tailCap == 0 {
		return n, nil
	}
	if len(p) >= c.tailCap {
		c.tail = append(c.tail[:0], p[len(p)-c.tailCap:]...)
		c.tailStart = 0
		return n, nil
	}
	for _, b := range p {
		if len(c.tail) < c.tailCap {
			c.tail = append(c.tail, b)
			continue
		}
		c.tail[c.tailStart] = b
		c.tailStart = (c.tailStart + 1) % c.tailCap
	}
	return n, nil
}

// Total is every byte written.
func (c *CappedBuffer) Total() int64 { return c.total }

// Dropped is the number of bytes left out of String.
func (c *CappedBuffer) Dropped() int64 {
	return c.total - int64(len(c.head)) - int64(len(c.tail))
}

// String is head, a marker naming the dropped byte count if any, then tail.
func (c *CappedBuffer) String() string {
	tail := append(append([]byte{}, c.tail[c.tailStart:]...), c.tail[:c.tailStart]...)
	if d := c.Dropped(); d > 0 {
		return string(c.head) + fmt.Sprintf("\n[... %d bytes dropped ...]\n", d) + string(tail)
	}
	return string(c.head) + string(tail)
}
