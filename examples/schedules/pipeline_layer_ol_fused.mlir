// CoCoNet schedule ol(RS,fuse(P2P-C),AG) of examples/pipeline_layer.mlir, produced by
//   distir-opt examples/pipeline_layer.mlir -p 'split-allreduce{dim=1 targets=sum},reorder-send{targets=recv},reorder-allgather{targets=recv},fuse-collectives{targets=out},overlap{targets=sum_rs,out}'
// or by the Python schedule API (tuning/schedule.py, PAPER_SCHEDULES); regenerate
// with: python -m distir.tuning.schedule examples/schedules
builtin.module {
  dist.mesh @grid shape = [2, ?] axes = ["pp", "tp"]
  func.func @transformer(%in: !dist.tensor<2x2048x12288xf16, @grid, [at<0>, local]>, %b: !dist.tensor<12288xf16, @grid, [at<1>, replicated]>, %r: !dist.tensor<2x2048x12288xf16, @grid, [at<1>, replicated]>) -> !dist.tensor<2x2048x12288xf16, @grid, [at<1>, replicated]> {
    %out = coll.overlap chunks 4 -> !dist.tensor<2x2048x12288xf16, @grid, [at<1>, replicated]> {
      %sum_rs = coll.reduce_scatter sum %in dim 1 axes [1] : !dist.tensor<2x2048x12288xf16, @grid, [at<0>, local]> -> !dist.tensor<2x2048x12288xf16, @grid, [at<0>, sliced<1>]>
      %out_1 = coll.fused_all_gather %sum_rs axes [1] : !dist.tensor<2x2048x12288xf16, @grid, [at<0>, sliced<1>]> -> !dist.tensor<2x2048x12288xf16, @grid, [at<1>, replicated]> {
      ^bb0(%sum_rs_1: !dist.tensor<2x2048x12288xf16, @grid, [at<0>, sliced<1>]>):
        %recv_s = coll.send %sum_rs_1 to 1 : !dist.tensor<2x2048x12288xf16, @grid, [at<0>, sliced<1>]> -> !dist.tensor<2x2048x12288xf16, @grid, [at<1>, sliced<1>]>
        %biased_s = dist.map(%recv_s, %b) : (!dist.tensor<2x2048x12288xf16, @grid, [at<1>, sliced<1>]>, !dist.tensor<12288xf16, @grid, [at<1>, replicated]>) -> !dist.tensor<2x2048x12288xf16, @grid, [at<1>, sliced<1>]> {
        ^bb0(%x: f16, %y: f16):
          %z = arith.addf %x, %y : f16
          dist.yield %z : f16
        }
        %drop_s = dist.dropout %biased_s p 0.1 seed 7 : !dist.tensor<2x2048x12288xf16, @grid, [at<1>, sliced<1>]> -> !dist.tensor<2x2048x12288xf16, @grid, [at<1>, sliced<1>]>
        %r_s = dist.take_slice %r dim 1 axis 1 : !dist.tensor<2x2048x12288xf16, @grid, [at<1>, replicated]> -> !dist.tensor<2x2048x12288xf16, @grid, [at<1>, sliced<1>]>
        %out_s = dist.map(%drop_s, %r_s) : (!dist.tensor<2x2048x12288xf16, @grid, [at<1>, sliced<1>]>, !dist.tensor<2x2048x12288xf16, @grid, [at<1>, sliced<1>]>) -> !dist.tensor<2x2048x12288xf16, @grid, [at<1>, sliced<1>]> {
        ^bb0(%x_1: f16, %y_1: f16):
          %z_1 = arith.addf %x_1, %y_1 : f16
          dist.yield %z_1 : f16
        }
        coll.yield %out_s : !dist.tensor<2x2048x12288xf16, @grid, [at<1>, sliced<1>]>
      }
      coll.yield %out_1 : !dist.tensor<2x2048x12288xf16, @grid, [at<1>, replicated]>
    }
    func.return %out : !dist.tensor<2x2048x12288xf16, @grid, [at<1>, replicated]>
  }
}
