package harness

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Terminus-2's parser tells the model what Python's json.loads said about its
// reply ("Invalid JSON: Expecting ',' delimiter: line 1 column 9 (char 8) |
// Content: '...'"), so the harness reads JSON as CPython's C scanner does:
// the same accepted documents (NaN, Infinity), the same first error, at the
// same character index. Values decode to pyValue: nil, bool, *big.Int,
// float64, string, []pyValue, *pyObject.

type pyValue = any

// pyObject is a decoded JSON object: a later duplicate key replaces the value
// and keeps the first one's place, as a Python dict does.
type pyObject struct {
	keys []string
	vals map[string]pyValue
}

func (o *pyObject) get(k string) (pyValue, bool) { v, ok := o.vals[k]; return v, ok }

// pyJSONError is json.JSONDecodeError: a message and a character index.
type pyJSONError struct {
	msg string
	doc []rune
	pos int
}

func (e *pyJSONError) Error() string {
	line := 1
	last := -1
	for i := 0; i < e.pos && i < len(e.doc); i++ {
		if e.doc[i] == '\n' {
			line, last = line+1, i
		}
	}
	return fmt.Sprintf("%s: line %d column %d (char %d)", e.msg, line, e.pos-last, e.pos)
}

// pyDecoder decodes one document; trailingComma is CPython 3.13's "Illegal
// trailing comma" check (3.12 reports those as the next expected token).
type pyDecoder struct {
	s             []rune
	trailingComma bool
}

// pyLoads is json.loads(s).
func pyLoads(s string, trailingComma bool) (pyValue, error) {
	d := &pyDecoder{s: []rune(s), trailingComma: trailingComma}
	i := d.ws(0)
	v, end, err := d.value(i)
	if err != nil {
		return nil, err
	}
	if end = d.ws(end); end != len(d.s) {
		return nil, d.err("Extra data", end)
	}
	return v, nil
}

func (d *pyDecoder) err(msg string, pos int) error { return &pyJSONError{msg: msg, doc: d.s, pos: pos} }

func (d *pyDecoder) ws(i int) int {
	for i < len(d.s) && (d.s[i] == ' ' || d.s[i] == '\t' || d.s[i] == '\n' || d.s[i] == '\r') {
		i++
	}
	return i
}

func (d *pyDecoder) has(i int, lit string) bool {
	r := []rune(lit)
	if i+len(r) > len(d.s) {
		return false
	}
	for k, c := range r {
		if d.s[i+k] != c {
			return false
		}
	}
	return true
}

// value is scan_once: a value starting at i, and the index after it.
func (d *pyDecoder) value(i int) (pyValue, int, error) {
	if i >= len(d.s) {
		return nil, i, d.err("Expecting value", i)
	}
	switch c := d.s[i]; {
	case c == '"':
		return d.str(i + 1)
	case c == '{':
		return d.object(i + 1)
	case c == '[':
		return d.array(i + 1)
	case d.has(i, "null"):
		return nil, i + 4, nil
	case d.has(i, "true"):
		return true, i + 4, nil
	case d.has(i, "false"):
		return false, i + 5, nil
	case d.has(i, "NaN"):
		return math.NaN(), i + 3, nil
	case d.has(i, "Infinity"):
		return math.Inf(1), i + 8, nil
	case d.has(i, "-Infinity"):
		return math.Inf(-1), i + 9, nil
	}
	return d.number(i)
}

func isDigit(r rune) bool { return r >= '0' && r <= '9' }

// number is _match_number_unicode: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?
func (d *pyDecoder) number(start int) (pyValue, int, error) {
	i, n := start, len(d.s)
	if i < n && d.s[i] == '-' {
		i++
	}
	switch {
	case i < n && d.s[i] >= '1' && d.s[i] <= '9':
		for i < n && isDigit(d.s[i]) {
			i++
		}
	case i < n && d.s[i] == '0':
		i++
	default:
		return nil, start, d.err("Expecting value", start)
	}
	float := false
	if i+1 < n && d.s[i] == '.' && isDigit(d.s[i+1]) {
		float, i = true, i+2
		for i < n && isDigit(d.s[i]) {
			i++
		}
	}
	if i < n && (d.s[i] == 'e' || d.s[i] == 'E') {
		j := i + 1
		if j < n && (d.s[j] == '-' || d.s[j] == '+') {
			j++
		}
		if j < n && isDigit(d.s[j]) {
			for j < n && isDigit(d.s[j]) {
				j++
			}
			float, i = true, j
		}
	}
	text := string(d.s[start:i])
	if float {
		f, _ := strconv.ParseFloat(text, 64) // out of range: ±Inf, as Python's float()
		return f, i, nil
	}
	b, _ := new(big.Int).SetString(text, 10)
	return b, i, nil
}

// str is scanstring_unicode: the string whose opening quote is at i-1.
func (d *pyDecoder) str(i int) (pyValue, int, error) {
	begin := i - 1
	var b strings.Builder
	for {
		if i >= len(d.s) {
			return nil, i, d.err("Unterminated string starting at", begin)
		}
		c := d.s[i]
		switch {
		case c == '"':
			return b.String(), i + 1, nil
		case c <= 0x1f:
			return nil, i, d.err("Invalid control character at", i)
		case c != '\\':
			b.WriteRune(c)
			i++
			continue
		}
		i++ // the backslash
		if i >= len(d.s) {
			return nil, i, d.err("Unterminated string starting at", begin)
		}
		if e := d.s[i]; e != 'u' {
			r, ok := map[rune]rune{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}[e]
			if !ok {
				return nil, i, d.err("Invalid \\escape", i-1)
			}
			b.WriteRune(r)
			i++
			continue
		}
		r, next, err := d.unicodeEscape(i)
		if err != nil {
			return nil, i, err
		}
		b.WriteRune(r)
		i = next
	}
}

// unicodeEscape reads \uXXXX (u at i), joining a surrogate pair.
func (d *pyDecoder) unicodeEscape(u int) (rune, int, error) {
	hex4 := func(at int) (rune, bool) {
		if at+4 > len(d.s) {
			return 0, false
		}
		v, err := strconv.ParseUint(string(d.s[at:at+4]), 16, 32)
		return rune(v), err == nil && !strings.ContainsAny(string(d.s[at:at+4]), "+-")
	}
	if u+5 >= len(d.s) {
		return 0, u, d.err("Invalid \\uXXXX escape", u)
	}
	c, ok := hex4(u + 1)
	if !ok {
		return 0, u, d.err("Invalid \\uXXXX escape", u)
	}
	next := u + 5
	if c >= 0xd800 && c <= 0xdbff && next+6 < len(d.s) && d.s[next] == '\\' && d.s[next+1] == 'u' {
		c2, ok := hex4(next + 2)
		if !ok {
			return 0, u, d.err("Invalid \\uXXXX escape", next+1)
		}
		if c2 >= 0xdc00 && c2 <= 0xdfff {
			return 0x10000 + ((c - 0xd800) << 10) | (c2 - 0xdc00), next + 6, nil
		}
		// Not a low surrogate: the high one stands alone, the second escape is read next.
	}
	return c, next, nil
}

// object is _parse_object_unicode: the members after the '{' at i-1.
func (d *pyDecoder) object(i int) (pyValue, int, error) {
	o := &pyObject{vals: map[string]pyValue{}}
	if i = d.ws(i); i < len(d.s) && d.s[i] == '}' {
		return o, i + 1, nil
	}
	for {
		if i >= len(d.s) || d.s[i] != '"' {
			return nil, i, d.err("Expecting property name enclosed in double quotes", i)
		}
		k, next, err := d.str(i + 1)
		if err != nil {
			return nil, next, err
		}
		if i = d.ws(next); i >= len(d.s) || d.s[i] != ':' {
			return nil, i, d.err("Expecting ':' delimiter", i)
		}
		v, next, err := d.value(d.ws(i + 1))
		if err != nil {
			return nil, next, err
		}
		key := k.(string)
		if _, dup := o.vals[key]; !dup {
			o.keys = append(o.keys, key)
		}
		o.vals[key] = v
		if i = d.ws(next); i < len(d.s) && d.s[i] == '}' {
			return o, i + 1, nil
		}
		if i >= len(d.s) || d.s[i] != ',' {
			return nil, i, d.err("Expecting ',' delimiter", i)
		}
		comma := i
		if i = d.ws(i + 1); d.trailingComma && i < len(d.s) && d.s[i] == '}' {
			return nil, i, d.err("Illegal trailing comma before end of object", comma)
		}
	}
}

// array is _parse_array_unicode: the items after the '[' at i-1.
func (d *pyDecoder) array(i int) (pyValue, int, error) {
	out := []pyValue{}
	if i = d.ws(i); i < len(d.s) && d.s[i] == ']' {
		return out, i + 1, nil
	}
	for {
		v, next, err := d.value(i)
		if err != nil {
			return nil, next, err
		}
		out = append(out, v)
		if i = d.ws(next); i < len(d.s) && d.s[i] == ']' {
			return out, i + 1, nil
		}
		if i >= len(d.s) || d.s[i] != ',' {
			return nil, i, d.err("Expecting ',' delimiter", i)
		}
		comma := i
		if i = d.ws(i + 1); d.trailingComma && i < len(d.s) && d.s[i] == ']' {
			return nil, i, d.err("Illegal trailing comma before end of array", comma)
		}
	}
}

// pyRepr is Python's repr() of a str.
func pyRepr(s string) string {
	quote := '\''
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		quote = '"'
	}
	var b strings.Builder
	b.WriteRune(quote)
	for _, r := range s {
		switch {
		case r == quote || r == '\\':
			b.WriteRune('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < ' ' || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x7f || (unicode.IsPrint(r) && r != utf8.RuneError):
			b.WriteRune(r)
		case r <= 0xff:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteRune(quote)
	return b.String()
}

// pyTruthy is Python's bool(v).
func pyTruthy(v pyValue) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case *big.Int:
		return x.Sign() != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case []pyValue:
		return len(x) > 0
	case *pyObject:
		return len(x.keys) > 0
	}
	return true
}
