package dev.kord.bench.flink;

/** One output record: the event's uuid, seq and ts, and the user's count after it. */
public class Result {
    public String uuid;
    public long seq;
    /** The user's count including this event: seq + 1 when counted exactly once. */
    public long count;
    public String ts;

    public Result() {}

    public Result(String uuid, long seq, long count, String ts) {
        this.uuid = uuid;
        this.seq = seq;
        this.count = count;
        this.ts = ts;
    }
}
