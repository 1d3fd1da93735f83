package activities

// SetAfterSend installs the hook that runs right after a turn's command or
// keystrokes were sent, before anything is recorded: an error there is a
// worker that died mid-turn.
func SetAfterSend(a *Activities, f func(TurnInput) error) { a.afterSend = f }
