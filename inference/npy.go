package inference

import (
	"encoding/binary"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// decodeNpy reads a NumPy .npy array of unsigned or signed integers (as vLLM
// encodes routed experts: np.save of a uint8, or uint16 past 256 experts,
// array) into int32s and its shape. Only C order is accepted.
func decodeNpy(b []byte) ([]int32, []int, error) {
	if len(b) < 10 || string(b[:6]) != "\x93NUMPY" {
		return nil, nil, fmt.Errorf("not a .npy array (no \\x93NUMPY magic)")
	}
	var hlen, off int
	switch b[6] {
	case 1:
		hlen, off = int(binary.LittleEndian.Uint16(b[8:10])), 10
	case 2, 3:
		if len(b) < 12 {
			return nil, nil, fmt.Errorf(".npy header cut short")
		}
		hlen, off = int(binary.LittleEndian.Uint32(b[8:12])), 12
	default:
		return nil, nil, fmt.Errorf(".npy version %d.%d is not supported", b[6], b[7])
	}
	if off+hlen > len(b) {
		return nil, nil, fmt.Errorf(".npy header of %d bytes runs past the %d bytes given", hlen, len(b))
	}
	header, data := string(b[off:off+hlen]), b[off+hlen:]
	descr, shape, err := parseNpyHeader(header)
	if err != nil {
		return nil, nil, err
	}
	n := 1
	for _, d := range shape {
		n *= d
	}
	size, signed, ok := npyInt(descr)
	if !ok {
		return nil, nil, fmt.Errorf(".npy dtype %q is not a little-endian integer type", descr)
	}
	if len(data) != n*size {
		return nil, nil, fmt.Errorf(".npy shape %v of %s needs %d bytes, the array has %d", shape, descr, n*size, len(data))
	}
	out := make([]int32, n)
	for i := range out {
		p := data[i*size:]
		switch {
		case size == 1 && signed:
			out[i] = int32(int8(p[0]))
		case size == 1:
			out[i] = int32(p[0])
		case size == 2 && signed:
			out[i] = int32(int16(binary.LittleEndian.Uint16(p)))
		case size == 2:
			out[i] = int32(binary.LittleEndian.Uint16(p))
		default:
			out[i] = int32(binary.LittleEndian.Uint32(p))
		}
	}
	return out, shape, nil
}

var (
	npyDescr = regexp.MustCompile(`'descr':\s*'([^']*)'`)
	npyOrder = regexp.MustCompile(`'fortran_order':\s*(True|False)`)
	npyShape = regexp.MustCompile(`'shape':\s*\(([^)]*)\)`)
)

func parseNpyHeader(h string) (string, []int, error) {
	d, o, s := npyDescr.FindStringSubmatch(h), npyOrder.FindStringSubmatch(h), npyShape.FindStringSubmatch(h)
	if d == nil || o == nil || s == nil {
		return "", nil, fmt.Errorf(".npy header %q lacks descr, fortran_order or shape", h)
	}
	if o[1] == "True" {
		return "", nil, fmt.Errorf(".npy array is in Fortran order; routed experts are C order")
	}
	var shape []int
	for _, f := range strings.Split(s[1], ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 {
			return "", nil, fmt.Errorf(".npy shape (%s) is not a tuple of sizes", s[1])
		}
		shape = append(shape, v)
	}
	return d[1], shape, nil
}

// npyInt maps a dtype descr to its byte size and signedness ('|u1', '<u2', '<i4', ...).
func npyInt(descr string) (int, bool, bool) {
	switch descr {
	case "|u1", "<u1", "u1":
		return 1, false, true
	case "|i1", "<i1", "i1":
		return 1, true, true
	case "<u2":
		return 2, false, true
	case "<i2":
		return 2, true, true
	case "<i4", "<u4":
		return 4, descr == "<i4", true
	}
	return 0, false, false
}
