// Package scenario registers every scenario of the lab with the engine: the
// lockfree command, and every test that runs the scenarios, imports it for
// that. A scenario is a folder of its own below this one — its problem, its
// approaches, its checks — and one line here.
package scenario

import (
	_ "github.com/lockfree-go/lockfree/cmd/lockfree/internal/scenario/accounts"
	_ "github.com/lockfree-go/lockfree/cmd/lockfree/internal/scenario/documents"
	_ "github.com/lockfree-go/lockfree/cmd/lockfree/internal/scenario/events"
	_ "github.com/lockfree-go/lockfree/cmd/lockfree/internal/scenario/inventory"
	_ "github.com/lockfree-go/lockfree/cmd/lockfree/internal/scenario/orders"
	_ "github.com/lockfree-go/lockfree/cmd/lockfree/internal/scenario/payments"
	_ "github.com/lockfree-go/lockfree/cmd/lockfree/internal/scenario/singleton"
)
