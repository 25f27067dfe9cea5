package migrate_test

import (
	"fmt"
	"os"

	"github.com/lockfree-go/lockfree/migrate"
)

// Print writes a package's schema for another migration tool, with the table
// names lockfree would use in schema "app" with the prefix "lf_".
func ExamplePrint() {
	ms := []migrate.Migration{{
		Package: "demo", Version: 1, Name: "counters",
		Up: `CREATE TABLE {{counters}} (id text PRIMARY KEY, n bigint NOT NULL)`,
	}}
	if err := migrate.Print(os.Stdout, migrate.Names{Schema: "app", Prefix: "lf_"}, false, ms); err != nil {
		fmt.Println(err)
	}
	// Output:
	// -- lockfree demo 001: counters
	// CREATE TABLE "app"."lf_counters" (id text PRIMARY KEY, n bigint NOT NULL);
}
