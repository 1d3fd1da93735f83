package gpu

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Slot is the devices one GPU process gets; no devices means CPU.
type Slot struct {
	Devices []int
}

// Device is the torch device string for the slot.
func (s Slot) Device() string {
	if len(s.Devices) == 0 {
		return "cpu"
	}
	return "cuda"
}

// Env pins the process to its devices.
func (s Slot) Env() []string {
	ds := make([]string, len(s.Devices))
	for i, d := range s.Devices {
		ds[i] = strconv.Itoa(d)
	}
	return []string{"CUDA_VISIBLE_DEVICES=" + strings.Join(ds, ",")}
}

func (s Slot) String() string {
	if len(s.Devices) == 0 {
		return "cpu"
	}
	return "cuda:" + strings.TrimPrefix(s.Env()[0], "CUDA_VISIBLE_DEVICES=")
}

// Slots splits the devices named by spec into groups of size per process.
// spec: "cpu"; a list like "0,1,2,3"; or "" to ask nvidia-smi, falling back
// to one CPU slot when there is no GPU.
func Slots(spec string, size int) ([]Slot, error) {
	if size < 1 {
		return nil, fmt.Errorf("--gpus-per-process %d must be at least 1", size)
	}
	var devs []int
	switch strings.TrimSpace(spec) {
	case "cpu":
		return []Slot{{}}, nil
	case "":
		devs = detectGPUs()
		if len(devs) == 0 {
			return []Slot{{}}, nil
		}
	default:
		for _, f := range strings.Split(spec, ",") {
			d, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || d < 0 {
				return nil, fmt.Errorf("--gpus %q: %q is not a device index (use e.g. 0,1 or cpu)", spec, f)
			}
			devs = append(devs, d)
		}
	}
	if len(devs)%size != 0 {
		return nil, fmt.Errorf("--gpus %q: %d devices do not split into groups of %d", spec, len(devs), size)
	}
	var out []Slot
	for i := 0; i < len(devs); i += size {
		out = append(out, Slot{Devices: devs[i : i+size]})
	}
	return out, nil
}

func detectGPUs() []int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nvidia-smi", "--query-gpu=index", "--format=csv,noheader").Output()
	if err != nil {
		return nil
	}
	var devs []int
	for _, l := range strings.Fields(string(out)) {
		if d, err := strconv.Atoi(l); err == nil {
			devs = append(devs, d)
		}
	}
	return devs
}

// TrainerCommand runs the reference trainer with its state in workdir.
func TrainerCommand(workdir string, slot Slot, extra ...string) []string {
	return Reference().TrainerCommand(workdir, slot, "", extra...)
}

// InferenceCommand runs the reference inference server; model "" is a seeded random init.
func InferenceCommand(model string, slot Slot, extra ...string) []string {
	return Reference().InferenceCommand(model, slot, extra...)
}
