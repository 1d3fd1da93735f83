package activities

import "github.com/t1flow/t1flow/sandbox"

// SetChannelSeen installs the hook that gets each verification's runner
// channel (nil removes it).
func SetChannelSeen(f func(sandbox.RunnerChannel)) { channelSeen = f }
