//go:build tools

// Package tools pins Docker Compose v5 (the `docker compose` CLI plugin that
// Harbor's Docker environment drives) for scripts/ensure-docker-compose.sh,
// which builds github.com/docker/compose/v5/cmd from this module. Its go.mod
// repeats compose's exclude directives, which `go install pkg@version`
// refuses.
package tools

import _ "github.com/docker/compose/v5/cmd"
