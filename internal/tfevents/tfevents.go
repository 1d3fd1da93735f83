// Package tfevents writes TensorBoard event files: TFRecord-framed Event
// protocol buffers (tensorflow/core/util/event.proto) holding scalar
// summaries, the format `tensorboard --logdir` reads. Only what scalars
// need is encoded, with google.golang.org/protobuf's wire encoder.
package tfevents

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"sort"

	"google.golang.org/protobuf/encoding/protowire"
)

// Event fields (event.proto) and Summary.Value fields (summary.proto).
const (
	eventWallTime    = 1 // double
	eventStep        = 2 // int64
	eventFileVersion = 3 // string
	eventSummary     = 5 // Summary
	summaryValue     = 1 // repeated Value
	valueTag         = 1 // string
	valueSimple      = 2 // float
)

// FileVersion is the first event of every file, as TensorFlow writes it.
const FileVersion = "brain.Event:2"

// FileName is an event file's name: TensorBoard reads every file of a run
// directory whose name contains "tfevents", in name order; wall is the
// first event's time (seconds), suffix tells files of one second apart.
func FileName(wall float64, suffix string) string {
	return fmt.Sprintf("events.out.tfevents.%010d.%s", int64(wall), suffix)
}

// File is a whole event file: the file-version event, then for each step
// (in order) one event with its scalars (tags in order; NaN and infinite
// values are left out: TensorBoard would draw nothing for them).
func File(wall float64, steps map[int64]map[string]float64) []byte {
	var b []byte
	b = appendRecord(b, versionEvent(wall))
	order := make([]int64, 0, len(steps))
	for s := range steps {
		order = append(order, s)
	}
	sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
	for _, s := range order {
		b = appendRecord(b, scalarEvent(wall, s, steps[s]))
	}
	return b
}

func versionEvent(wall float64) []byte {
	var e []byte
	e = protowire.AppendTag(e, eventWallTime, protowire.Fixed64Type)
	e = protowire.AppendFixed64(e, math.Float64bits(wall))
	e = protowire.AppendTag(e, eventFileVersion, protowire.BytesType)
	return protowire.AppendString(e, FileVersion)
}

func scalarEvent(wall float64, step int64, scalars map[string]float64) []byte {
	tags := make([]string, 0, len(scalars))
	for k := range scalars {
		tags = append(tags, k)
	}
	sort.Strings(tags)
	var sum []byte
	for _, tag := range tags {
		v := scalars[tag]
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		var val []byte
		val = protowire.AppendTag(val, valueTag, protowire.BytesType)
		val = protowire.AppendString(val, tag)
		val = protowire.AppendTag(val, valueSimple, protowire.Fixed32Type)
		val = protowire.AppendFixed32(val, math.Float32bits(float32(v)))
		sum = protowire.AppendTag(sum, summaryValue, protowire.BytesType)
		sum = protowire.AppendBytes(sum, val)
	}
	var e []byte
	e = protowire.AppendTag(e, eventWallTime, protowire.Fixed64Type)
	e = protowire.AppendFixed64(e, math.Float64bits(wall))
	e = protowire.AppendTag(e, eventStep, protowire.VarintType)
	e = protowire.AppendVarint(e, uint64(step))
	e = protowire.AppendTag(e, eventSummary, protowire.BytesType)
	return protowire.AppendBytes(e, sum)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskedCRC is TFRecord's checksum: CRC-32C, rotated and offset.
func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return ((c >> 15) | (c << 17)) + 0xa282ead8
}

// appendRecord frames data as a TFRecord: length, its masked CRC, data, its masked CRC.
func appendRecord(b, data []byte) []byte {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(data)))
	b = append(b, n[:]...)
	b = binary.LittleEndian.AppendUint32(b, maskedCRC(n[:]))
	b = append(b, data...)
	return binary.LittleEndian.AppendUint32(b, maskedCRC(data))
}
