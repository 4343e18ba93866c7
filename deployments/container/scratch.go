package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/moby/moby/client"

	"github.com/keelson-dev/keelson/deployments/container/scratchimage"
)

// loadScratch makes img (scratchimage) from the checkout at src as tag and
// loads it into the engine in one call.
func (r *Runtime) loadScratch(ctx context.Context, img *scratchimage.Image, root, src, tag string) error {
	layer, err := img.MakeLayer(root, src)
	if err != nil {
		return err // scratchimage.ErrNotPlain: the builder makes it
	}
	defer layer.Close()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(layer.WriteArchive(pw, tag)) }()
	defer pr.Close()
	res, err := r.docker.ImageLoad(ctx, pr, client.ImageLoadWithQuiet(true))
	if err != nil {
		return r.engineError("loading the image", err)
	}
	defer res.Close()
	dec := json.NewDecoder(res)
	for {
		var msg struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return r.engineError("loading the image", err)
		}
		if msg.Error != "" {
			return fmt.Errorf("loading the image: %s", msg.Error)
		}
	}
}
