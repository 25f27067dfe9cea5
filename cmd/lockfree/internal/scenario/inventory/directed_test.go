package inventory

import (
	"slices"
	"testing"
)

// An inventory taker does the operation of the mix that writes the row it
// was sent to.
func TestInventoryDirected(t *testing.T) {
	for _, tc := range []struct {
		row  string
		i    int
		kind int // the first number of the mix of the operation's kind
	}{
		{"sku-3", 3, 0},
		{"case-3", 3, inventorySales + inventoryBaskets},
		{"price-0", 0, inventorySales + inventoryBaskets + inventoryRestocks},
		{"bid-12", 12, inventorySales + inventoryBaskets + inventoryRestocks + inventoryReprices},
		{"hold-7-2", 7, inventorySales + inventoryBaskets + inventoryRestocks + inventoryReprices + inventoryBids},
	} {
		i, n, ok := inventoryDirected(tc.row)
		if !ok || i != tc.i || n < tc.kind || n >= inventoryMixOf {
			t.Errorf("%s: SKU %d, operation %d, %v; want SKU %d, operation from %d", tc.row, i, n, ok, tc.i, tc.kind)
		}
	}
	for _, row := range []string{"", "doc-1", "sku-", "sku-x", "pay-1-2"} {
		if _, _, ok := inventoryDirected(row); ok {
			t.Errorf("%q: directed", row)
		}
	}
}

// The bids' rows are blind to a stale write: pause and delay stop no
// worker there (the engine's TestArmSkipsBlindKeys shows an arm skip
// them).
func TestBlindKeys(t *testing.T) {
	if got := (inventory{}).BlindKeys(); !slices.Equal(got, []string{"bid-"}) {
		t.Fatalf("BlindKeys %q, want bid-", got)
	}
}
