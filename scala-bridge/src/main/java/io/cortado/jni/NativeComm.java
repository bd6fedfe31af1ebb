// SPDX-License-Identifier: Apache-2.0
package io.cortado.jni;

import io.cortado.NativeLoader;

/**
 * Natives over the collectives between the processes (or Spark tasks) of one training job
 * (jni/native_comm_jni.cpp, cpp/comm/communicator.hpp). A job's ranks meet in three steps:
 *
 * <ol>
 *   <li>every rank opens its listening socket ({@link #listen}) and rank 0 prepares what the
 *       backend needs from it ({@link #rootRendezvous}: the MPI port, the NCCL id);
 *   <li>the caller's rendezvous (Spark's {@code BarrierTaskContext.allGather}) hands every rank
 *       the others' {@code host:port} and rank 0's rendezvous bytes;
 *   <li>every rank calls {@link #connect}, which blocks until all have joined, and hands the
 *       communicator to {@link NativeTrainer#create}.
 * </ol>
 *
 * <p>Free a listener that is never connected with {@link #closeListener}, and every
 * communicator with {@link #dispose} once its trainer is disposed. Errors: CortadoCommException
 * for peers that cannot be reached, refuse the handshake, die or time out (the rank and host
 * named); CortadoConfigException for bad arguments.
 */
public final class NativeComm {
  static {
    NativeLoader.load();
  }

  private NativeComm() {}

  /** The backends this build has ("mpi", "nccl", "tcp", "ucx"), sorted. */
  public static native String[] backends();

  /**
   * Opens a listening TCP socket on {@code host} (an address or name of this machine, bound to
   * that address only; one that is not an address of this machine is refused), on a free port;
   * returns its handle.
   */
  public static long listen(String host) {
    return listen(host, 0, 0);
  }

  /**
   * As {@link #listen(String)}, on the first free port of {@code firstPort..lastPort} (both
   * included; 0 and 0: any free port), for hosts whose firewalls open a fixed range between the
   * workers. A CortadoCommException naming the range when every port of it is taken; a
   * CortadoConfigException for a range that is not one.
   */
  public static native long listen(String host, int firstPort, int lastPort);

  /** The port the listener took. */
  public static native int port(long listener);

  /** Closes a listener that {@link #connect} did not take. */
  public static native void closeListener(long listener);

  /**
   * Called on rank 0 before the rendezvous: what the other ranks need from it for {@code
   * backend} (the mpi port name, the NCCL unique id; empty for tcp).
   */
  public static native byte[] rootRendezvous(String backend);

  /**
   * Joins rank {@code rank} of {@code world} and returns the communicator's handle. Takes the
   * listener (its handle is freed here, whatever happens).
   *
   * @param peers "host:port" of every rank, in rank order
   * @param token the job's secret; a peer with another token or attempt is refused
   * @param rendezvous what {@link #rootRendezvous} gave rank 0 (may be empty)
   * @param device the CUDA device of this rank (nccl), or -1
   * @param connectTimeoutSeconds set-up retries until this deadline
   * @param timeoutSeconds a collective fails when no byte moved for this long
   * @param firstPort with {@code lastPort}: the ports tcp's recursive doubling listens on (the
   *     first free ones of the range; 0 and 0 for any free port)
   * @param allreduce tcp: how a buffer is summed, as {@code cortado train --allreduce}: "ring",
   *     "doubling" (recursive doubling), "halving" (recursive halving then doubling) or "auto"
   *     (the one the cost model says is fastest for the buffer and the world); {@link #describe}
   *     names it. A CortadoConfigException for any other value, whatever the backend
   * @param latencyKb tcp, with "auto": a step's fixed cost in KB of the link's rate (its latency
   *     times its rate; about 3 on 1 Gbit/s, 32 on 10 Gbit/s), at least 1
   * @param hierarchical tcp (and the set-up ring of ucx and nccl): where ranks share hosts (the
   *     same host in {@code peers}) and there are two hosts or more, sum within each host first,
   *     then between one rank per host
   */
  public static native long connect(
      long listener,
      String backend,
      int rank,
      int world,
      String[] peers,
      String token,
      int attempt,
      byte[] rendezvous,
      int device,
      double connectTimeoutSeconds,
      double timeoutSeconds,
      int firstPort,
      int lastPort,
      String allreduce,
      int latencyKb,
      boolean hierarchical);

  /**
   * What the gradients of a trainer built with this communicator travel as between the ranks:
   * "float32", "bfloat16" or "float16" (half the bytes; each partial sum rounded on the way), or
   * "auto" (the compute precision: a half type on a GPU computing in one, else float32). Call
   * before {@link NativeTrainer#create}. Returns what will travel: "auto", or the type, or
   * "float32" when the backend carries float32 only (tcp carries all three).
   *
   * @throws io.cortado.CortadoConfigException for any other value
   */
  public static native String setExchangePrecision(long comm, String precision);

  /** This communicator's backend name. */
  public static native String backend(long comm);

  /**
   * One line for the log: the backend, this rank and what carries its data to and from each
   * peer ("ucx: rank 0 of 2; to rank 1: tcp/lo, from rank 1: tcp/lo"); for tcp, how an
   * allreduce goes ("tcp: rank 0 of 2; allreduce: doubling").
   */
  public static native String describe(long comm);

  /**
   * From any thread: what the operation in progress waits for when no byte has moved for at
   * least {@code minSeconds} ("31 s for data from rank 1 (10.0.0.2:4000) during allreduce");
   * empty otherwise, and for backends that cannot tell (all but tcp).
   */
  public static native String waitingOn(long comm, double minSeconds);

  /**
   * Ends every blocked and later collective of this communicator (on every rank: the peers'
   * calls fail too) with {@code reason}. Any thread; idempotent.
   */
  public static native void abort(long comm, String reason);

  /** Sums {@code data} over every rank, in place (for tests and small control messages). */
  public static native void allReduce(long comm, float[] data);

  /** Frees the handle (a trainer built with it keeps its own reference). */
  public static native void dispose(long comm);
}
