package deviceplugin

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/go-logr/logr"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// recoveryOptions make a panic in any gRPC handler (Allocate, GetPreferredAllocation, ListAndWatch,
// …) an Internal error for that call, logged with its stack, instead of the end of the process: the
// kubelet fails that one admission, and every other pod on the node keeps its plugin.
func recoveryOptions(log logr.Logger) []grpc.ServerOption {
	handler := recovery.WithRecoveryHandlerContext(func(_ context.Context, p any) error {
		log.Error(fmt.Errorf("panic: %v", p), "gRPC handler panicked; the call fails, the plugin keeps serving", "stack", string(debug.Stack()))
		return status.Errorf(codes.Internal, "cardinal: internal error: %v", p)
	})
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(recovery.UnaryServerInterceptor(handler)),
		grpc.ChainStreamInterceptor(recovery.StreamServerInterceptor(handler)),
	}
}
