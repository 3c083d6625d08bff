// Command loadgen drives a Querator node with produce -> lease -> complete cycles from many goroutines,
// for bench/load.py --driver go: a client that costs the shared cores far less than Python clients, so
// that what the node can do shows, not what its clients can (docs/benchmarks.md, "Small requests").
//
//	loadgen -url http://127.0.0.1:2319 -queue bench -batch 1 -workers 24 -duration 5s
//
// It prints {"items": N, "requests": N, "dry": N} as bench/load.py's Python clients do. Bodies are binary
// protobuf (or JSON with -json), encoded by hand: the five messages it needs do not justify generated code.
package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

const protobufType = "application/protobuf"

// client is one worker's: its own keep-alive connection, as a consumer holding one would, so that its
// produce, lease and complete reach the same process of a node of several (docs/processes.md).
type client struct {
	http    *http.Client
	url     string
	queue   string
	batch   int
	json    bool
	payload []byte
}

type leased struct {
	partition int
	ids       []string
}

func main() {
	url := flag.String("url", "", "the node's base URL")
	queue := flag.String("queue", "bench", "queue name")
	batch := flag.Int("batch", 1, "items per request")
	workers := flag.Int("workers", 24, "concurrent cycles")
	duration := flag.Duration("duration", 5*time.Second, "how long to run")
	useJSON := flag.Bool("json", false, "JSON bodies instead of binary protobuf")
	flag.Parse()
	payload := bytes.Repeat([]byte{'x'}, 1024)
	var items, requests, dry atomic.Int64
	deadline := time.Now().Add(*duration)
	var wg sync.WaitGroup
	errs := make(chan error, *workers)
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			transport := &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, DisableCompression: true}
			c := &client{
				http:    &http.Client{Transport: transport, Timeout: time.Minute},
				url:     *url,
				queue:   *queue,
				batch:   *batch,
				json:    *useJSON,
				payload: payload,
			}
			clientID := "loadgen-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(w)
			for time.Now().Before(deadline) {
				if err := c.produce(); err != nil {
					errs <- err
					return
				}
				got, err := c.lease(clientID)
				if err != nil {
					errs <- err
					return
				}
				if len(got.ids) == 0 {
					dry.Add(1)
				} else if err := c.complete(got); err != nil {
					errs <- err
					return
				}
				items.Add(int64(len(got.ids)))
				requests.Add(3)
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
	fmt.Printf("{\"items\": %d, \"requests\": %d, \"dry\": %d}\n", items.Load(), requests.Load(), dry.Load())
}

func (c *client) produce() error {
	var body []byte
	if c.json {
		item := map[string]string{"bytes": base64.StdEncoding.EncodeToString(c.payload)}
		items := make([]map[string]string, c.batch)
		for i := range items {
			items[i] = item
		}
		body, _ = json.Marshal(map[string]any{"queue_name": c.queue, "request_timeout": "1m", "items": items})
	} else {
		item := appendBytes(nil, 5, c.payload)
		body = appendString(nil, 1, c.queue)
		body = appendString(body, 2, "1m")
		for i := 0; i < c.batch; i++ {
			body = appendBytes(body, 3, item)
		}
	}
	_, err := c.post("/v1/queue.produce", body)
	return err
}

func (c *client) lease(clientID string) (leased, error) {
	var body []byte
	if c.json {
		body, _ = json.Marshal(map[string]any{
			"queue_name": c.queue, "batch_size": c.batch, "client_id": clientID, "request_timeout": "5s",
		})
	} else {
		body = appendString(nil, 1, c.queue)
		body = appendVarint(body, 2, uint64(c.batch))
		body = appendString(body, 3, clientID)
		body = appendString(body, 4, "5s")
	}
	reply, err := c.post("/v1/queue.lease", body)
	if err != nil {
		return leased{}, err
	}
	if c.json {
		var r struct {
			Partition int                   `json:"partition"`
			Items     []struct{ ID string } `json:"items"`
		}
		if err := json.Unmarshal(reply, &r); err != nil {
			return leased{}, err
		}
		got := leased{partition: r.Partition}
		for _, i := range r.Items {
			got.ids = append(got.ids, i.ID)
		}
		return got, nil
	}
	return decodeLease(reply)
}

func (c *client) complete(got leased) error {
	var body []byte
	if c.json {
		body, _ = json.Marshal(map[string]any{
			"queue_name": c.queue, "partition": got.partition, "ids": got.ids, "request_timeout": "1m",
		})
	} else {
		body = appendString(nil, 1, c.queue)
		body = appendVarint(body, 2, uint64(got.partition))
		body = appendString(body, 3, "1m")
		for _, id := range got.ids {
			body = appendString(body, 4, id)
		}
	}
	_, err := c.post("/v1/queue.complete", body)
	return err
}

func (c *client) post(path string, body []byte) ([]byte, error) {
	req, err := http.NewRequest(http.MethodPost, c.url+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	contentType := protobufType
	if c.json {
		contentType = "application/json"
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Accept", contentType)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %d %q", path, resp.StatusCode, reply)
	}
	return reply, nil
}

// -- protobuf's wire format, the little of it used here ---------------------------------------------

func appendTag(b []byte, field int, wireType uint64) []byte {
	return appendUvarint(b, uint64(field)<<3|wireType)
}

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendVarint(b []byte, field int, v uint64) []byte {
	return appendUvarint(appendTag(b, field, 0), v)
}

func appendBytes(b []byte, field int, v []byte) []byte {
	b = appendUvarint(appendTag(b, field, 2), uint64(len(v)))
	return append(b, v...)
}

func appendString(b []byte, field int, v string) []byte {
	return appendBytes(b, field, []byte(v))
}

var errTruncated = errors.New("truncated protobuf")

func readUvarint(b []byte) (uint64, int, error) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return v, i + 1, nil
		}
	}
	return 0, 0, errTruncated
}

// fields calls fn with each field of a message: its number and, for length-delimited ones, its bytes
// (for varints, value holds the number).
func fields(b []byte, fn func(field int, value uint64, data []byte)) error {
	for len(b) > 0 {
		key, n, err := readUvarint(b)
		if err != nil {
			return err
		}
		b = b[n:]
		field := int(key >> 3)
		switch key & 7 {
		case 0:
			v, n, err := readUvarint(b)
			if err != nil {
				return err
			}
			fn(field, v, nil)
			b = b[n:]
		case 1:
			if len(b) < 8 {
				return errTruncated
			}
			b = b[8:]
		case 2:
			size, n, err := readUvarint(b)
			if err != nil || uint64(len(b)-n) < size {
				return errTruncated
			}
			fn(field, 0, b[n:n+int(size)])
			b = b[n+int(size):]
		case 5:
			if len(b) < 4 {
				return errTruncated
			}
			b = b[4:]
		default:
			return fmt.Errorf("unknown wire type %d", key&7)
		}
	}
	return nil
}

// decodeLease reads a QueueLeaseResponse: partition = 2, items = 3, each item's id = 4.
func decodeLease(b []byte) (leased, error) {
	var got leased
	var itemErr error
	err := fields(b, func(field int, value uint64, data []byte) {
		switch field {
		case 2:
			got.partition = int(value)
		case 3:
			if e := fields(data, func(f int, _ uint64, d []byte) {
				if f == 4 {
					got.ids = append(got.ids, string(d))
				}
			}); e != nil {
				itemErr = e
			}
		}
	})
	if err == nil {
		err = itemErr
	}
	return got, err
}
