package fencedlock

import "sync"

// waitList is the registry behind Wakeups: channels per lock name, closed at
// the name's next release. The zero value is ready; it is safe for
// concurrent use.
type waitList struct {
	mu sync.Mutex
	m  map[string][]chan struct{}
}

func (w *waitList) add(name string) (<-chan struct{}, func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string][]chan struct{}{}
	}
	ch := make(chan struct{})
	w.m[name] = append(w.m[name], ch)
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		ws := w.m[name]
		for i, c := range ws {
			if c == ch {
				w.m[name] = append(ws[:i:i], ws[i+1:]...)
				break
			}
		}
		if len(w.m[name]) == 0 {
			delete(w.m, name)
		}
	}
}

// wake closes the channels of name; wake("") closes every channel.
func (w *waitList) wake(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for n, ws := range w.m {
		if name != "" && n != name {
			continue
		}
		for _, c := range ws {
			close(c)
		}
		delete(w.m, n)
	}
}
