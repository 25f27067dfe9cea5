// Package localetcd starts a throwaway single-node etcd server inside the
// lab's process (go.etcd.io/etcd/server/v3/embed), for the approaches whose
// locks live in etcd, and resolves the server a run uses.
package localetcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Server is a running embedded etcd server.
type Server struct {
	// Endpoint is its client URL (http://127.0.0.1:port).
	Endpoint string
	e        *embed.Etcd
	dir      string
}

// startBound bounds the wait for the server to be ready.
const startBound = 30 * time.Second

// Start starts a server whose data lives in a new temporary folder,
// removed by Stop. Its ticks are short (10ms heartbeat, 100ms election), so
// that its shortest lease is one second, and it does not fsync: it is for
// runs of the lab, never for data.
func Start(ctx context.Context) (*Server, error) {
	dir, err := os.MkdirTemp("", "lockfree-etcd-")
	if err != nil {
		return nil, err
	}
	s, err := start(ctx, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func start(ctx context.Context, dir string) (*Server, error) {
	client, peer := freeURL(), freeURL()
	if client == nil || peer == nil {
		return nil, errors.New("localetcd: no free port on 127.0.0.1")
	}
	cfg := embed.NewConfig()
	cfg.Name = "lockfree"
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.TickMs, cfg.ElectionMs = 10, 100
	cfg.UnsafeNoFsync = true
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("localetcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err = <-e.Err():
	case <-time.After(startBound):
		err = fmt.Errorf("not ready within %v", startBound)
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("localetcd: %w", err)
	}
	return &Server{Endpoint: client.String(), e: e, dir: dir}, nil
}

// freeURL is an http URL on a free port of 127.0.0.1, or nil.
func freeURL() *url.URL {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(port)}
}

// Stop stops the server and removes its data.
func (s *Server) Stop() {
	s.e.Close()
	_ = os.RemoveAll(s.dir)
}

// Endpoints splits a comma-separated list of endpoints.
func Endpoints(list string) []string {
	var out []string
	for _, e := range strings.Split(list, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// Ping reports whether the etcd at endpoints (comma-separated) answers.
func Ping(ctx context.Context, endpoints string) error {
	c, err := clientv3.New(clientv3.Config{Endpoints: Endpoints(endpoints), DialTimeout: 2 * time.Second, Logger: Logger()})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = c.Get(ctx, "lockfree-ping")
	return err
}

// Resolve returns the endpoints a run uses: endpoints when given, else
// those of a throwaway server it starts (and notes on log), else "" (the
// etcd approaches are then reported as skipped); stop stops what it
// started.
func Resolve(ctx context.Context, endpoints string, log io.Writer) (_ string, stop func()) {
	if endpoints != "" {
		return endpoints, func() {}
	}
	s, err := Start(ctx)
	if err != nil {
		fmt.Fprintf(log, "lockfree: no etcd server: %v\n", err)
		return "", func() {}
	}
	fmt.Fprintf(log, "lockfree: etcd embedded at %s (throwaway)\n", s.Endpoint)
	return s.Endpoint, s.Stop
}

// Logger is the logger of the lab's etcd clients: none. A worker's client
// would log its retries on the worker's stderr otherwise.
func Logger() *zap.Logger { return zap.NewNop() }
