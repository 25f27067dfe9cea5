package migrate

import (
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
)

var fileName = regexp.MustCompile(`^(\d+)_([a-z0-9_]+)\.(up|down)\.sql$`)

// FromDir reads the migrations in folder dir of fsys, as FromFS does: the
// usual form is
//
//	//go:embed migrations/*.sql
//	var migrationFiles embed.FS
//
//	func Migrations() []migrate.Migration {
//		return migrate.FromDir("mypkg", migrationFiles, "migrations")
//	}
func FromDir(pkg string, fsys fs.FS, dir string) []Migration {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(fmt.Sprintf("migrate: %s: %v", pkg, err))
	}
	return FromFS(pkg, sub)
}

// FromFS reads migrations named NNN_name.up.sql and NNN_name.down.sql from
// the root of fsys (an embed.FS, usually) for package pkg. It panics on a
// malformed set: the files are compiled into the binary, so a bad one is a
// programming error caught by the package's first test.
func FromFS(pkg string, fsys fs.FS) []Migration {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		panic(fmt.Sprintf("migrate: %s: %v", pkg, err))
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		v, _ := strconv.Atoi(m[1])
		body, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			panic(fmt.Sprintf("migrate: %s: %v", pkg, err))
		}
		mig := byVersion[v]
		if mig == nil {
			mig = &Migration{Package: pkg, Version: v, Name: m[2]}
			byVersion[v] = mig
		}
		if m[3] == "up" {
			mig.Up = string(body)
		} else {
			mig.Down = string(body)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.Up == "" {
			panic(fmt.Sprintf("migrate: %s %d has no up migration", pkg, m.Version))
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out
}
