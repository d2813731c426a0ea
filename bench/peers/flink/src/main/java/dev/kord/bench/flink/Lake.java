package dev.kord.bench.flink;

import java.io.IOException;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import org.apache.flink.connector.file.sink.FileSink;
import org.apache.flink.connector.file.sink.compactor.FileCompactStrategy;
import org.apache.flink.connector.file.sink.compactor.RecordWiseFileCompactor;
import org.apache.flink.core.fs.FSDataInputStream;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.io.SimpleVersionedSerializer;
import org.apache.flink.formats.parquet.ParquetInputFile;
import org.apache.flink.formats.parquet.ParquetWriterFactory;
import org.apache.flink.streaming.api.functions.sink.filesystem.BucketAssigner;
import org.apache.flink.streaming.api.functions.sink.filesystem.OutputFileConfig;
import org.apache.flink.streaming.api.functions.sink.filesystem.bucketassigners.SimpleVersionedStringSerializer;
import org.apache.hadoop.conf.Configuration;
import org.apache.parquet.hadoop.ParquetReader;
import org.apache.parquet.hadoop.ParquetWriter;
import org.apache.parquet.hadoop.api.InitContext;
import org.apache.parquet.hadoop.api.ReadSupport;
import org.apache.parquet.hadoop.api.WriteSupport;
import org.apache.parquet.hadoop.metadata.CompressionCodecName;
import org.apache.parquet.io.InputFile;
import org.apache.parquet.io.OutputFile;
import org.apache.parquet.io.api.Binary;
import org.apache.parquet.io.api.Converter;
import org.apache.parquet.io.api.GroupConverter;
import org.apache.parquet.io.api.PrimitiveConverter;
import org.apache.parquet.io.api.RecordConsumer;
import org.apache.parquet.io.api.RecordMaterializer;
import org.apache.parquet.schema.LogicalTypeAnnotation;
import org.apache.parquet.schema.MessageType;
import org.apache.parquet.schema.PrimitiveType.PrimitiveTypeName;
import org.apache.parquet.schema.Types;

/**
 * --lake: the results landed as Parquet files beside the Kafka sink, as
 * kord's main example does with -lake: one directory per action
 * ({@code action=<action>/}), rows {uuid, seq, count, action, page,
 * page_n}, zstd.
 *
 * <p>A Flink {@link FileSink} in bulk format: each writer rolls its part
 * file at every checkpoint and the sink's committer publishes the files of
 * a checkpoint once it completes, so a file is visible only when the
 * checkpoint that holds its rows (and commits the same results to Kafka)
 * has completed. With compaction (--lake-compact-ms), the rolled files
 * stay hidden ({@code .part-...}) until Flink's compactor has merged the
 * files of a bucket, every that many milliseconds of checkpoints, into one
 * {@code compacted-part-...parquet}, which the committer publishes in turn.
 * Parquet files cannot be concatenated, so the compactor reads the rows back
 * ({@link RecordWiseFileCompactor} with {@link ResultReader}) and writes
 * them again.
 */
final class Lake {
    private Lake() {}

    /**
     * The rows' schema: kord's lake rows, examples/userbehavior's Result
     * (page_n, its -pages stage's number, is null here as it is there
     * without -pages).
     */
    static final MessageType SCHEMA = Types.buildMessage()
            .required(PrimitiveTypeName.BINARY).as(LogicalTypeAnnotation.stringType()).named("uuid")
            .required(PrimitiveTypeName.INT64).named("seq")
            .required(PrimitiveTypeName.INT64).named("count")
            .required(PrimitiveTypeName.BINARY).as(LogicalTypeAnnotation.stringType()).named("action")
            .optional(PrimitiveTypeName.BINARY).as(LogicalTypeAnnotation.stringType()).named("page")
            .optional(PrimitiveTypeName.INT64).named("page_n")
            .named("result");

    /**
     * The sink. compactCheckpoints: merge each bucket's files every that
     * many checkpoints (and what is left when the input ends, a drained
     * stop); 0 publishes every writer's file of every checkpoint as it is.
     */
    static FileSink<Result> sink(Path dir, int compactCheckpoints) {
        FileSink.DefaultBulkFormatBuilder<Result> b = FileSink.forBulkFormat(
                        new org.apache.flink.core.fs.Path(dir.toUri()), new ParquetWriterFactory<>(Lake::writer))
                .withBucketAssigner(new ByAction())
                .withOutputFileConfig(OutputFileConfig.builder()
                        .withPartPrefix("part")
                        .withPartSuffix(".parquet")
                        .build());
        if (compactCheckpoints > 0) {
            b.enableCompact(
                    FileCompactStrategy.Builder.newBuilder()
                            .enableCompactionOnCheckpoint(compactCheckpoints)
                            .build(),
                    new RecordWiseFileCompactor<>(new ResultReader()));
        }
        return b.build();
    }

    /** A Parquet writer of results, zstd (parquet's default level, 3), on Flink's output stream. */
    static ParquetWriter<Result> writer(OutputFile out) throws IOException {
        return new WriterBuilder(out)
                .withCompressionCodec(CompressionCodecName.ZSTD)
                .build();
    }

    /** Bucket = "action=" + the event's action, as kord's filesink.BucketBy in the example. */
    static final class ByAction implements BucketAssigner<Result, String> {
        private static final long serialVersionUID = 1L;

        @Override
        public String getBucketId(Result r, Context context) {
            return "action=" + (r.action == null ? "" : r.action);
        }

        @Override
        public SimpleVersionedSerializer<String> getSerializer() {
            return SimpleVersionedStringSerializer.INSTANCE;
        }
    }

    private static final class WriterBuilder extends ParquetWriter.Builder<Result, WriterBuilder> {
        WriterBuilder(OutputFile out) {
            super(out);
        }

        @Override
        protected WriterBuilder self() {
            return this;
        }

        @Override
        protected WriteSupport<Result> getWriteSupport(Configuration conf) {
            return new ResultWriteSupport();
        }
    }

    /** Writes a result's four columns. */
    private static final class ResultWriteSupport extends WriteSupport<Result> {
        private RecordConsumer rc;

        @Override
        public WriteContext init(Configuration conf) {
            return new WriteContext(SCHEMA, new HashMap<>());
        }

        @Override
        public void prepareForWrite(RecordConsumer recordConsumer) {
            rc = recordConsumer;
        }

        @Override
        public void write(Result r) {
            rc.startMessage();
            rc.startField("uuid", 0);
            rc.addBinary(Binary.fromString(r.uuid));
            rc.endField("uuid", 0);
            rc.startField("seq", 1);
            rc.addLong(r.seq);
            rc.endField("seq", 1);
            rc.startField("count", 2);
            rc.addLong(r.count);
            rc.endField("count", 2);
            rc.startField("action", 3);
            rc.addBinary(Binary.fromString(r.action == null ? "" : r.action));
            rc.endField("action", 3);
            if (r.page != null) {
                rc.startField("page", 4);
                rc.addBinary(Binary.fromString(r.page));
                rc.endField("page", 4);
            }
            rc.endMessage();
        }
    }

    /** Reads a lake file's rows back, for the compactor. */
    static final class ResultReader implements RecordWiseFileCompactor.Reader.Factory<Result> {
        private static final long serialVersionUID = 1L;

        @Override
        public RecordWiseFileCompactor.Reader<Result> createFor(org.apache.flink.core.fs.Path path)
                throws IOException {
            FileSystem fs = path.getFileSystem();
            long length = fs.getFileStatus(path).getLen();
            FSDataInputStream in = fs.open(path);
            ParquetReader<Result> reader;
            try {
                reader = new ReaderBuilder(new ParquetInputFile(in, length)).build();
            } catch (IOException | RuntimeException e) {
                in.close();
                throw e;
            }
            return new RecordWiseFileCompactor.Reader<>() {
                @Override
                public Result read() throws IOException {
                    return reader.read();
                }

                @Override
                public void close() throws IOException {
                    try {
                        reader.close();
                    } finally {
                        in.close();
                    }
                }
            };
        }
    }

    private static final class ReaderBuilder extends ParquetReader.Builder<Result> {
        ReaderBuilder(InputFile file) {
            super(file);
        }

        @Override
        protected ReadSupport<Result> getReadSupport() {
            return new ResultReadSupport();
        }
    }

    private static final class ResultReadSupport extends ReadSupport<Result> {
        @Override
        public ReadContext init(InitContext context) {
            return new ReadContext(SCHEMA);
        }

        @Override
        public RecordMaterializer<Result> prepareForRead(Configuration conf, Map<String, String> keyValueMetaData,
                MessageType fileSchema, ReadContext readContext) {
            return new ResultMaterializer();
        }
    }

    /** Builds a fresh Result per row (the compactor hands it to the writer before reading the next). */
    private static final class ResultMaterializer extends RecordMaterializer<Result> {
        private Result current;

        private final GroupConverter root = new GroupConverter() {
            private final Converter[] fields = {
                new PrimitiveConverter() {
                    @Override
                    public void addBinary(Binary v) {
                        current.uuid = v.toStringUsingUTF8();
                    }
                },
                new PrimitiveConverter() {
                    @Override
                    public void addLong(long v) {
                        current.seq = v;
                    }
                },
                new PrimitiveConverter() {
                    @Override
                    public void addLong(long v) {
                        current.count = v;
                    }
                },
                new PrimitiveConverter() {
                    @Override
                    public void addBinary(Binary v) {
                        current.action = v.toStringUsingUTF8();
                    }
                },
                new PrimitiveConverter() {
                    @Override
                    public void addBinary(Binary v) {
                        current.page = v.toStringUsingUTF8();
                    }
                },
                new PrimitiveConverter() {
                    @Override
                    public void addLong(long v) {
                        // page_n: never written
                    }
                },
            };

            @Override
            public Converter getConverter(int fieldIndex) {
                return fields[fieldIndex];
            }

            @Override
            public void start() {
                current = new Result();
            }

            @Override
            public void end() {}
        };

        @Override
        public Result getCurrentRecord() {
            return current;
        }

        @Override
        public GroupConverter getRootConverter() {
            return root;
        }
    }
}
