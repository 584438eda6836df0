// Package descriptors loads the repository's protos for the Go tools, which have no generated
// code: a buf image of proto/ is read as a FileDescriptorSet (the two are wire-compatible).
package descriptors

import (
	"fmt"
	"io/ioutil"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// Load reads the image at path and builds its files; errors name the path.
func Load(path string) (*protoregistry.Files, error) {
	raw, err := ioutil.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var set descriptorpb.FileDescriptorSet
	// An image carries fields a FileDescriptorSet does not declare (buf's own): dropped.
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return files, nil
}
