// RUN: distir-opt %s -p 'fix-mesh-sizes{ranks=4}' | filecheck %s
// RUN: not distir-opt %s -p 'fix-mesh-sizes' 2>&1 | filecheck %s --check-prefix=NORANKS
// The '?' sizes of meshes are fixed for the run's rank count; views follow their parent.

// CHECK: dist.mesh @world shape = [4]
// CHECK: dist.mesh @grid shape = [2, 2] axes = ["pp", "tp"]
// CHECK: dist.mesh @flat shape = [4] view @grid [[0, 1]]
// NORANKS: 'fix-mesh-sizes' pass: 'dist.mesh' op mesh @world has size [?]: give ranks=N
dist.mesh @world shape = [?]
dist.mesh @grid shape = [2, ?] axes = ["pp", "tp"]
dist.mesh @flat shape = [?] view @grid [[0, 1]]
